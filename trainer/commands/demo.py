"""`trainer demo`: generate a default dataset once, then train DeepFM on it through
`trainer local`, exactly as a job would run, and say where the model is."""
from __future__ import annotations

import argparse
import os
import shutil

from trainer.local import runner
from trainer.data import datagen


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", default=os.path.join("out", "demo"),
                        help="where the dataset (kept) and the job folder (fresh each run) go")
    parser.add_argument("--train-rows", type=int, default=400_000)
    parser.add_argument("--eval-rows", type=int, default=50_000)
    parser.add_argument("--input-mode", choices=("File", "Pipe"), default="File")
    parser.add_argument("--hp", action="append", type=runner.key_value, default=[], metavar="KEY=VALUE")


def ensure_dataset(folder: str, train_rows: int, eval_rows: int) -> dict:
    """Generate the dataset unless the same one is already there."""
    marker = os.path.join(folder, f".complete-{train_rows}-{eval_rows}")
    if not os.path.exists(marker):
        shutil.rmtree(folder, ignore_errors=True)
        print(f"generating {train_rows} + {eval_rows} synthetic Criteo-like rows in {folder}", flush=True)
        datagen.generate(folder, train_rows, eval_rows, files=4)
        open(marker, "w").close()
    return {"training": [os.path.join(folder, "train")], "evaluation": [os.path.join(folder, "eval")]}


def main(args: argparse.Namespace) -> int:
    channels = ensure_dataset(os.path.join(args.dir, "data"), args.train_rows, args.eval_rows)
    job_dir = os.path.abspath(os.path.join(args.dir, "job"))
    shutil.rmtree(job_dir, ignore_errors=True)  # a fresh job, not a resumed one
    print(f"training DeepFM: trainer local --job-dir {job_dir} --input-mode {args.input_mode}", flush=True)
    job_dir, exit_code = runner.run(runner.LocalJob(channels, dict(args.hp), args.input_mode), job_dir)
    print(runner.summary(job_dir, exit_code), flush=True)
    return exit_code

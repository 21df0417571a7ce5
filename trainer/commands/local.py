"""`trainer local`: run a training job on this machine, in a folder laid out like /opt/ml
(trainer.local.runner), as SageMaker would run it."""
from __future__ import annotations

import argparse
import tempfile

from trainer.local.runner import LocalJob, add_job_arguments, run, summary


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_job_arguments(parser)
    parser.add_argument("--job-dir", help="keep the job folder here (reused: checkpoints resume)")


def main(args: argparse.Namespace) -> int:
    job = LocalJob.from_args(args)
    job_dir = args.job_dir
    if not job_dir:
        job_dir = tempfile.mkdtemp(prefix="trainer-job-")
        print(f"job folder: {job_dir}", flush=True)
    # Every host's runs (output/tensorboard under each host's folder) show side by side.
    print(f"TensorBoard, live: tensorboard --logdir {job_dir}", flush=True)
    chief_dir, exit_code = run(job, job_dir)
    print(summary(chief_dir, exit_code), flush=True)
    return exit_code

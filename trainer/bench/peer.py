"""The project's DeepFM against DeepCTR's (deepctr 0.9.4, the DeepFM most users train), on
the same generated data, epochs, batch size, optimizer and learning rate: training
samples/sec and eval AUC.

Ours is a real job (`trainer local`, defaults, File mode). DeepCTR runs in its own
environment (bench-envs/deepctr.txt; `./build.sh bench peer` makes it and sets
TRAINER_BENCH_DEEPCTR_PYTHON) through trainer/bench/deepctr_job.py. DeepCTR asks PyPI for
its latest version at import, in a thread that would keep a network-less process alive: the
benchmark points that request at a closed local port, so it fails at once and the run goes on.

One epoch by default: deep CTR models with large embedding tables overfit from the second
epoch on (the "one-epoch phenomenon", Zhang et al., CIKM 2022), and both DeepFMs here do
with Adam (`--epochs 3` shows each one's eval AUC by epoch): after the first epoch their AUCs
compare how much of the rare ids each memorised, not the models. More rows in one epoch
instead (600,000: as many steps as three epochs of 200,000).
"""
from __future__ import annotations

import argparse
import os
import tempfile

from trainer.bench import recorded
from trainer.bench.common import local_job_metrics
from trainer.measure.rates import json_result
from trainer.contract.hyperparameters import SPEC_BY_NAME
from trainer.errors import JobError

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLOSED_PORT_PROXY = "http://127.0.0.1:9"  # the discard port: nothing listens, the connect fails at once


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-rows", type=int, default=600_000)
    parser.add_argument("--eval-rows", type=int, default=50_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--feature-size", type=int, default=1_000_000,
                        help="distinct ids of the generated data (the DeepFM sample has 117,581; Criteo's "
                             "day logs, ids seen at least 10 times, about a million)")
    parser.add_argument("--optimizer", default=SPEC_BY_NAME["optimizer"].default,
                        choices=SPEC_BY_NAME["optimizer"].choices, help="for both")
    parser.add_argument("--learning-rate", type=float, default=SPEC_BY_NAME["learning_rate"].default,
                        help="for both")
    parser.add_argument("--deepctr-python", default=os.environ.get("TRAINER_BENCH_DEEPCTR_PYTHON"),
                        help="python of the DeepCTR environment (./build.sh bench peer sets it)")
    recorded.add_record_argument(parser)


# The figures kept in the repository (trainer.bench.recorded) and compared on every run.
RECORDED_FIGURES = {"ours_samples_per_sec": "our DeepFM's samples/s", "speedup": "ours / DeepCTR samples/s",
                    "ours_eval_auc": "our DeepFM's eval AUC", "deepctr_eval_auc": "DeepCTR's eval AUC"}


def ours(data: dict, args: argparse.Namespace, folder: str) -> dict:
    from trainer.local import runner

    job = runner.LocalJob({"training": [data["train"]], "evaluation": [data["eval"]]},
                            {"num_epochs": str(args.epochs), "feature_size": str(args.feature_size),
                             "optimizer": args.optimizer, "learning_rate": str(args.learning_rate)})
    exit_code, metrics = local_job_metrics(job, os.path.join(folder, "ours"))
    if metrics is None:
        raise JobError(f"bench peer: the project's job failed (exit {exit_code}); see {folder}/ours/output/failure")
    return {"samples_per_sec": metrics["train_samples_per_sec"], "eval_auc": metrics["eval_auc"],
            "eval_auc_by_epoch": [record["eval_auc"] for record in metrics["history"]]}


def deepctr(python: str, data: dict, args: argparse.Namespace) -> dict:
    env = {**os.environ, "PYTHONPATH": PROJECT_ROOT, "HTTPS_PROXY": CLOSED_PORT_PROXY,
           "HTTP_PROXY": CLOSED_PORT_PROXY, "https_proxy": CLOSED_PORT_PROXY, "http_proxy": CLOSED_PORT_PROXY,
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    command = [python, "-m", "trainer.bench.deepctr_job", "--train", data["train"], "--eval", data["eval"],
               "--epochs", str(args.epochs), "--optimizer", args.optimizer, "--learning-rate", str(args.learning_rate)]
    return json_result(command, env, 3600, "bench peer: DeepCTR's run")


def run(args: argparse.Namespace) -> dict:
    from trainer.data import datagen

    if not args.deepctr_python:
        raise JobError("bench peer needs DeepCTR's environment: run it as ./build.sh bench peer "
                       "(or pass --deepctr-python)")
    with tempfile.TemporaryDirectory(prefix="trainer-bench-peer-") as folder:
        data = datagen.generate(os.path.join(folder, "data"), args.train_rows, args.eval_rows, files=4,
                                feature_size=args.feature_size)
        rows = [{"model": "ours", **ours(data, args, folder)},
                {"model": "deepctr 0.9.4", **deepctr(args.deepctr_python, data, args)}]
    speedup = rows[0]["samples_per_sec"] / rows[1]["samples_per_sec"]
    result = {"benchmark": "peer", "rows": rows, "speedup": round(speedup, 2),
              "ours_samples_per_sec": rows[0]["samples_per_sec"],
              "ours_eval_auc": round(rows[0]["eval_auc"], 4), "deepctr_eval_auc": round(rows[1]["eval_auc"], 4),
              "auc_difference": round(rows[0]["eval_auc"] - rows[1]["eval_auc"], 4),
              "train_rows": args.train_rows, "eval_rows": args.eval_rows, "epochs": args.epochs,
              "feature_size": args.feature_size, "optimizer": args.optimizer, "learning_rate": args.learning_rate}
    result["against_recorded"] = recorded.compare("peer", result, RECORDED_FIGURES, args.record)
    return result


def table(result: dict) -> str:
    lines = ["DeepFM | samples/s | eval AUC | eval AUC by epoch", "--- | --- | --- | ---"]
    for row in result["rows"]:
        by_epoch = ", ".join(f"{auc:.4f}" for auc in row["eval_auc_by_epoch"])
        lines.append(f"{row['model']} | {row['samples_per_sec']:,.0f} | {row['eval_auc']:.4f} | {by_epoch}")
    lines += ["", f"- ours / DeepCTR samples/s: {result['speedup']}x",
              f"- ours - DeepCTR eval AUC: {result['auc_difference']:+.4f}",
              *recorded.lines(result["against_recorded"])]
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    epochs = f"{result['epochs']} epoch{'s' if result['epochs'] != 1 else ''}"
    return [Chart("peer", f"DeepFM: {result['train_rows']:,} rows, {result['feature_size']:,} ids, {epochs}, "
                          f"{result['optimizer']} {result['learning_rate']:g}",
                  "samples/s", [f"{row['model']} (eval AUC {row['eval_auc']:.3f})" for row in result["rows"]],
                  [row["samples_per_sec"] for row in result["rows"]],
                  highlight=[f"ours (eval AUC {result['rows'][0]['eval_auc']:.3f})"])]

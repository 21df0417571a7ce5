"""Samples per second and eval AUC of every distribution mode on the same data and model, in
one run: the figures of docs/modes-measured.md's "every mode on one machine".

Each mode trains the default DeepFM through `trainer local` (the same `train` as a job):
single, tower and mirrored (2 replicas), horovod (1 host x 2 processes, and 2 hosts x 1),
parameter servers (2 hosts in File and in Pipe mode, and 3 hosts) and multi-worker mirrored
(2 hosts); simulated hosts are network namespaces. The figure is the job's training
samples/sec from its metrics.json (the first step of each epoch, graph tracing, excluded).
On a 2-core machine the multi-process modes share the same two cores: compare them with
that in mind. `--feature-size` and `--signal` shape the generated data (`trainer datagen`):
with few ids and enough epochs every mode converges, and the eval AUCs say how good each
mode's model ends against the hidden model's own (the oracle, reported with them).
"""
from __future__ import annotations

import argparse
import os
import tempfile

from trainer.local import runner
from trainer.bench.common import local_job_metrics
from trainer.data import datagen

# name -> (hyperparameters, hosts, input mode)
MODES = {
    "single": ({"distribution": "single"}, 1, "File"),
    "single-pipe": ({"distribution": "single"}, 1, "Pipe"),
    "tower": ({"distribution": "tower", "replicas": "2"}, 1, "File"),
    "mirrored": ({"distribution": "mirrored", "replicas": "2"}, 1, "File"),
    "horovod": ({"distribution": "horovod", "processes_per_host": "2"}, 1, "File"),
    "horovod-2-hosts": ({"distribution": "horovod"}, 2, "File"),
    "parameter_server": ({"distribution": "parameter_server"}, 2, "File"),
    "parameter_server-pipe": ({"distribution": "parameter_server"}, 2, "Pipe"),
    "parameter_server-3-hosts": ({"distribution": "parameter_server"}, 3, "File"),
    "multi_worker_mirrored": ({"distribution": "multi_worker_mirrored"}, 2, "File"),
    "local_sgd": ({"distribution": "local_sgd"}, 2, "File"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--train-rows", type=int, default=200_000)
    parser.add_argument("--eval-rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--feature-size", type=int, default=117581, help="ids of the generated data")
    parser.add_argument("--signal", type=datagen.signal_scale, default=1.0,
                        help="the generated data's signal (trainer datagen)")


def run(args: argparse.Namespace) -> dict:
    rows = []
    with tempfile.TemporaryDirectory(prefix="trainer-bench-modes-") as folder:
        data = datagen.generate(os.path.join(folder, "data"), args.train_rows, args.eval_rows, files=4,
                                feature_size=args.feature_size, signal=args.signal)
        channels = {"training": [data["train"]], "evaluation": [data["eval"]]}
        for mode in args.modes.split(","):
            hyperparameters, hosts, input_mode = MODES[mode]
            job = runner.LocalJob(channels, {**hyperparameters, "num_epochs": str(args.epochs),
                                             "batch_size": str(args.batch_size)}, input_mode, hosts=hosts)
            exit_code, metrics = local_job_metrics(job, os.path.join(folder, mode))
            row = {"mode": mode, "hosts": hosts, "input_mode": input_mode, "exit_code": exit_code}
            if metrics is not None:
                row.update({key: metrics[key] for key in (
                    "train_samples_per_sec", "eval_auc", "steps", "world_size", "global_batch_size",
                    "train_seconds")})
            rows.append(row)
    return {"benchmark": "modes", "train_rows": args.train_rows, "epochs": args.epochs,
            "batch_size": args.batch_size, "feature_size": args.feature_size, "signal": args.signal,
            "oracle_eval_auc": data["oracle_eval_auc"], "cpus": os.cpu_count(), "rows": rows}


def table(result: dict) -> str:
    lines = ["mode | hosts | input | processes | global batch | samples/s | eval AUC | steps",
             "--- | --- | --- | --- | --- | --- | --- | ---"]
    for row in result["rows"]:
        if "train_samples_per_sec" not in row:
            lines.append(f"{row['mode']} | {row['hosts']} | {row['input_mode']} | failed (exit {row['exit_code']}) | | | |")
            continue
        lines.append(f"{row['mode']} | {row['hosts']} | {row['input_mode']} | {row['world_size']} | "
                     f"{row['global_batch_size']} | {row['train_samples_per_sec']:.0f} | {row['eval_auc']:.4f} | "
                     f"{row['steps']}")
    if result.get("oracle_eval_auc") is not None:
        lines.append(f"\nThe hidden model's own eval AUC (the oracle; no mode can beat it on average): "
                     f"{result['oracle_eval_auc']:.4f}, {result['feature_size']} ids, signal {result['signal']}.")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    rows = [row for row in result["rows"] if "train_samples_per_sec" in row]
    return [Chart("modes", "Training speed by distribution mode (same data and model)", "samples/s",
                  [row["mode"] for row in rows], [row["train_samples_per_sec"] for row in rows],
                  note=f"{result['cpus']} CPUs shared by every process of a mode.")]

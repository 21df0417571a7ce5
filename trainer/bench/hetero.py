"""Heterogeneous clusters: what moving heavy input work to a data host buys the training host.

Two real jobs (`trainer local`) on the same generated data and hooks: one host that reads,
parses, augments and trains by itself; and the same training host with a data host (an
instance group that only feeds it, through tf.data service), which does the reading,
parsing and augmenting. The augmentation is an augmentation-like map of the hooks' parse_fn
(rounds of a small dense transform of each record's values, a 1% jitter) that costs more
than the training step, as image decoding or feature crossing do in real input pipelines.
Each simulated host runs on CPUs of its own (`trainer local --host-cpus`), as separate
instances would: without that the two hosts of this one machine would share its cores and
nothing could be offloaded. Reported: the training group's samples/s, each job's eval AUC.
"""
from __future__ import annotations

import argparse
import os
import tempfile

from trainer.bench.common import local_job_metrics
from trainer.errors import JobError

AUGMENTING_HOOKS = '''
import numpy as np
import tensorflow as tf

ROUNDS = {rounds}


def parse_fn(serialized, hp):
    """The DeepFM record layout, and an augmentation-like map of each record's values."""
    n = hp["field_size"]
    parsed = tf.io.parse_example(serialized, {{"ids": tf.io.FixedLenFeature([n], tf.int64),
                                              "values": tf.io.FixedLenFeature([n], tf.float32),
                                              "label": tf.io.FixedLenFeature([1], tf.float32)}})
    values = parsed["values"]
    rng = np.random.default_rng(0)
    up = tf.constant(rng.normal(0, 0.1, (n, 256)), tf.float32)
    down = tf.constant(rng.normal(0, 0.1, (256, n)), tf.float32)
    hidden = values
    for _ in range(ROUNDS):
        hidden = tf.tanh(tf.matmul(tf.tanh(tf.matmul(hidden, up)), down))
    return {{"ids": parsed["ids"], "values": values * (1.0 + 0.01 * hidden)}}, parsed["label"]
'''


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--train-rows", type=int, default=200_000)
    parser.add_argument("--eval-rows", type=int, default=20_000)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--augment-rounds", type=int, default=20,
                        help="rounds of the augmentation map per record (its cost; 0: parsing only)")
    parser.add_argument("--host-cpus", type=int, default=max(1, len(os.sched_getaffinity(0)) // 2),
                        help="CPUs of each simulated host (default: half of this machine's)")


def job_of(data: dict, args: argparse.Namespace, hooks: str, groups: tuple = ()):
    from trainer.local import runner

    hp = {"num_epochs": str(args.epochs), "user_module": hooks}
    if groups:
        hp["training_groups"] = "train"
    hosts = sum(count for _, count, _ in groups) or 1
    return runner.LocalJob({"training": [data["train"]], "evaluation": [data["eval"]]}, hp, hosts=hosts,
                           groups=groups, host_cpus=args.host_cpus)


def run(args: argparse.Namespace) -> dict:
    from trainer.data import datagen

    needed = 2 * args.host_cpus
    if needed > len(os.sched_getaffinity(0)):
        raise JobError(f"bench hetero: two hosts of {args.host_cpus} CPU(s) each need {needed} CPUs; "
                       f"this process may use {len(os.sched_getaffinity(0))} (set --host-cpus)")
    with tempfile.TemporaryDirectory(prefix="trainer-bench-hetero-") as folder:
        data = datagen.generate(os.path.join(folder, "data"), args.train_rows, args.eval_rows, files=4)
        hooks = os.path.join(folder, "augmenting_hooks.py")
        with open(hooks, "w") as f:
            f.write(AUGMENTING_HOOKS.format(rounds=args.augment_rounds))
        rows = []
        for name, groups in (("training host alone", ()),
                             ("training host + 1 data host", (("train", 1, ""), ("data", 1, "")))):
            exit_code, metrics = local_job_metrics(job_of(data, args, hooks, groups), os.path.join(folder, str(len(rows))))
            if metrics is None:
                raise JobError(f"bench hetero: the job '{name}' failed (exit {exit_code})")
            rows.append({"job": name, "samples_per_sec": metrics["train_samples_per_sec"],
                         "eval_auc": metrics["eval_auc"]})
    return {"benchmark": "hetero", "rows": rows, "train_rows": args.train_rows, "epochs": args.epochs,
            "augment_rounds": args.augment_rounds, "host_cpus": args.host_cpus,
            "speedup": round(rows[1]["samples_per_sec"] / rows[0]["samples_per_sec"], 2)}


def table(result: dict) -> str:
    lines = ["job | training samples/s | eval AUC", "--- | --- | ---"]
    for row in result["rows"]:
        lines.append(f"{row['job']} | {row['samples_per_sec']:,.0f} | {row['eval_auc']:.4f}")
    lines += ["", f"- with a data host / alone, samples/s: {result['speedup']}x "
                  f"({result['host_cpus']} CPU(s) per host, {result['augment_rounds']} augmentation rounds a record)"]
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    return [Chart("hetero", f"DeepFM, augmenting input ({result['augment_rounds']} rounds a record), "
                            f"{result['host_cpus']} CPU(s) per host",
                  "training samples/s", [row["job"] for row in result["rows"]],
                  [row["samples_per_sec"] for row in result["rows"]], highlight=[result["rows"][1]["job"]])]

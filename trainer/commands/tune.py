"""`trainer tune`: measure CPU thread settings on a job's model and data, and print the best
(trainer.measure.tune searches; `trainer tune probe` is one measurement, in its own process).

    trainer tune --channel training=data/train --seconds 120 [--batch-sizes 256,512,1024]
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile

from trainer.contract.job import read_job
from trainer.cpu import settings as cpu
from trainer.measure.tune import PROBE_STEPS, measure_in_subprocess, settings_as_dict, tune_job
from trainer.local import runner
from trainer.logs import setup_logging


def measure_once(args: argparse.Namespace) -> int:
    """In a fresh process (OpenMP variables already in its environment): samples/sec of the
    job's model on the job's training data."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(args.intra)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter)
    from trainer.measure.rates import fit_rate, jobs_model_and_input, later_epochs_rate
    from trainer.models.optimizers import build_optimizer_state

    plan, hooks, model, training = jobs_model_and_input(args.batch_size, args.one_host)
    batch_size = args.batch_size or plan.batch_size
    model.compile(optimizer=hooks.optimizer_fn(), loss=tf.keras.losses.BinaryCrossentropy(),
                  steps_per_execution=plan.steps_per_execution)
    build_optimizer_state(model.optimizer, model.trainable_variables)
    if args.cached:  # the step alone, as a job's epochs after its first run it from the input's cache
        rate = later_epochs_rate(model, lambda dataset: dataset, training, args.steps, batch_size)
    else:  # the first epoch's: reading and parsing its files (traced, and the first window filled, untimed)
        rate = fit_rate(model, training.dataset(0).repeat(), args.steps, batch_size, 2 * plan.steps_per_execution)
    print(json.dumps({"samples_per_sec": rate}))
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tune_command")
    probe_parser = sub.add_parser("probe", help=argparse.SUPPRESS)
    probe_parser.add_argument("--intra", type=int, required=True)
    probe_parser.add_argument("--inter", type=int, required=True)
    probe_parser.add_argument("--steps", type=int, default=PROBE_STEPS)
    probe_parser.add_argument("--batch-size", type=int)
    probe_parser.add_argument("--cached", action="store_true", help="as the epochs after the first: a sample, cached")
    probe_parser.add_argument("--one-host", action="store_true", help="the job as this host alone would train it")
    runner.add_job_arguments(parser)
    parser.add_argument("--seconds", type=float, default=120.0, help="time budget of the search")
    parser.add_argument("--batch-sizes", default="", help="also compare these batch sizes (best settings)")
    parser.add_argument("--out", default=os.path.join("out", "tune"), help="folder for tune.json")


def main(args: argparse.Namespace) -> int:
    if args.tune_command == "probe":
        return measure_once(args)
    setup_logging()
    with tempfile.TemporaryDirectory(prefix="trainer-tune-") as folder:
        local = runner.LocalJob.from_args(args)
        job_dir = local.lay_out(folder)[local.host_names[0]]
        job = read_job(job_dir)
        start = settings_as_dict(cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores))
        print(job.tf_line.describe())  # which build the probes measure, and which settings it reads
        outcome = tune_job(job, start, args.seconds)
        kept, kept_rate, start_rate = outcome.kept, outcome.kept_rate, outcome.start_rate
        batches = []
        for batch_size in [int(b) for b in args.batch_sizes.split(",") if b]:
            batches.append({"batch_size": batch_size,
                            "samples_per_sec": measure_in_subprocess(job_dir, batch_size)(kept)})
    result = {"tensorflow_line": job.tf_line.describe(), "start": start, "kept": kept,
              "kept_samples_per_sec": kept_rate, "start_samples_per_sec": start_rate,
              "trials": [{**settings, "samples_per_sec": round(rate, 1)} for settings, rate in outcome.trials],
              "batch_sizes": batches, "seconds": round(outcome.seconds, 1)}
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "tune.json"), "w") as f:
        json.dump(result, f, indent=2)
    print("intra | inter | OMP_NUM_THREADS | KMP_AFFINITY | KMP_BLOCKTIME | samples/s")
    for trial in result["trials"]:
        print(" | ".join(str(trial[k]) for k in (*start, "samples_per_sec")))
    verdict = ("the defaults stay: nothing beat them by 3% when measured again" if kept == start else
               f"best: {kept} at {kept_rate:.0f} samples/s against the defaults' {start_rate:.0f}")
    print(verdict)
    for row in batches:
        print(f"batch_size={row['batch_size']}: {row['samples_per_sec']:.0f} samples/s")
    print("as hyperparameters: " + " ".join(f"{k}={v}" for k, v in kept.items()))
    return 0


"""Which TensorFlow build, with which OpenMP settings: the project's intel-tensorflow 2.14.0
(oneDNN on Intel OpenMP) against stock tensorflow-cpu 2.14.1 (oneDNN on TensorFlow's own
thread pool; bench-envs/tensorflow-cpu.txt, made by `./build.sh bench build`, which sets
TRAINER_BENCH_TF_CPU_PYTHON), each under several KMP/OMP settings (P17).

The step is the default DeepFM on cached input (no input cost). OpenMP reads its
variables when TensorFlow loads, so every (build, settings) pair runs in its own process,
in interleaved rounds (median round).
"""
from __future__ import annotations

import argparse
import json
import os
import sys

from trainer.bench.common import interleaved
from trainer.measure.rates import json_result
from trainer.errors import JobError

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def settings_cases() -> dict[str, dict]:
    """OpenMP environments to compare: a job's defaults here, and one change at a time."""
    from trainer.bench.common import job_cpu_settings

    job = {key: value for key, value in job_cpu_settings({}).environment().items() if key != "KMP_SETTINGS"}
    return {
        "job defaults": job,
        "OMP_NUM_THREADS=1": {**job, "OMP_NUM_THREADS": "1"},
        "KMP_BLOCKTIME=200": {**job, "KMP_BLOCKTIME": "200"},
        "KMP_AFFINITY=disabled": {**job, "KMP_AFFINITY": "disabled"},
        "nothing set": None,  # no OpenMP variable, TensorFlow's own thread counts
    }


OPENMP_VARIABLES = ("KMP_AFFINITY", "KMP_BLOCKTIME", "OMP_NUM_THREADS", "KMP_SETTINGS")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=300, help="timed steps per measure")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settings", default="",
                        help="comma-separated OpenMP settings to compare, by their names in the report "
                             "(default: all of them)")
    parser.add_argument("--tf-cpu-python", default=os.environ.get("TRAINER_BENCH_TF_CPU_PYTHON"),
                        help="python of the tensorflow-cpu environment (./build.sh bench build sets it)")
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--bare", action="store_true", help=argparse.SUPPRESS)


def step_rate(steps: int, bare: bool) -> dict:
    """In this process (its OpenMP environment already set): samples/sec of the step, with
    a job's thread counts."""
    from trainer.bench.common import apply_job_cpu_settings, cached_batches, default, default_model
    from trainer.measure.rates import fit_rate

    if not bare:
        apply_job_cpu_settings()
    import tensorflow as tf

    model, data = default_model(), cached_batches()
    fit_rate(model, data, 20, default("batch_size"))
    return {"samples_per_sec": fit_rate(model, data, steps, default("batch_size")), "tensorflow": tf.__version__}


def measure(python: str, environment: dict, steps: int) -> float:
    env = {key: value for key, value in os.environ.items() if key not in OPENMP_VARIABLES}
    env.update(environment or {}, PYTHONPATH=PROJECT_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
    command = [python, "-m", "trainer.bench.build", "--probe", "--steps", str(steps)]
    if environment is None:
        command.append("--bare")
    return json_result(command, env, 900, f"bench build: the probe under {python}")["samples_per_sec"]


def run(args: argparse.Namespace) -> dict:
    if not args.tf_cpu_python:
        raise JobError("bench build needs the tensorflow-cpu environment: run it as ./build.sh bench build "
                       "(or pass --tf-cpu-python)")
    known = settings_cases()
    chosen = [name.strip() for name in args.settings.split(",") if name.strip()] or list(known)
    unknown = [name for name in chosen if name not in known]
    if unknown:
        raise JobError(f"bench build --settings: no setting named {', '.join(unknown)}; "
                       f"choose among: {', '.join(known)}")
    builds = {"intel-tensorflow 2.14.0": sys.executable, "tensorflow-cpu 2.14.1": args.tf_cpu_python}
    cases = {(build, name): (python, known[name]) for build, python in builds.items() for name in chosen}
    rates = interleaved({key: (lambda python=python, environment=environment: measure(python, environment, args.steps))
                         for key, (python, environment) in cases.items()}, args.rounds)
    best = max(rates.values())
    rows = [{"build": build, "settings": name, "environment": cases[(build, name)][1],
             "samples_per_sec": round(rate, 1), "of_best": round(rate / best, 3)}
            for (build, name), rate in rates.items()]
    return {"benchmark": "build", "rows": rows, "settings": chosen, "steps": args.steps, "rounds": args.rounds}


def table(result: dict) -> str:
    lines = ["build | settings | samples/s | of the best", "--- | --- | --- | ---"]
    for row in result["rows"]:
        lines.append(f"{row['build']} | {row['settings']} | {row['samples_per_sec']:,.0f} | {row['of_best']:.2f}")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    labels = [f"{row['build'].split()[0]}: {row['settings']}" for row in result["rows"]]
    return [Chart("build", "TensorFlow build and OpenMP settings (cached input)", "samples/s", labels,
                  [row["samples_per_sec"] for row in result["rows"]],
                  highlight=["intel-tensorflow: job defaults"])]


if __name__ == "__main__":
    probe_args = argparse.ArgumentParser()
    add_arguments(probe_args)
    parsed = probe_args.parse_args()
    print(json.dumps(step_rate(parsed.steps, parsed.bare)))

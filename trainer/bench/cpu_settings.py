"""Which CPU settings change the built-in model's speed on the TensorFlow build that runs here.

Each case is the job's default settings with one thing changed: the OpenMP variables
(OMP_NUM_THREADS at every vCPU; compact affinity with KMP_BLOCKTIME=200), TensorFlow's
intra- and inter-op thread counts, and oneDNN's own switch (TF_ENABLE_ONEDNN_OPTS=0). OpenMP
reads its variables once, when TensorFlow loads, so each measurement is a fresh process
(`trainer tune probe`: the default DeepFM on generated File-mode data, the first steps left
out), the cases taking turns over the rounds (median). `read by this build` says whether the
build's TensorFlow reads the setting at all: intel-tensorflow (the 2.14 line) runs oneDNN on
Intel OpenMP; stock TensorFlow (the 2.21 line) on its own thread pool, with no OpenMP
runtime loaded. (`bench build` compares two TensorFlow 2.14 builds under OpenMP settings;
this one measures the build that runs, on either line, its thread counts and oneDNN's switch
included.)

    trainer bench settings --rows 100000 --rounds 3
"""
from __future__ import annotations

import argparse
import os
import tempfile

from trainer.bench.common import interleaved
from trainer.cpu import settings as cpu
from trainer.measure.tune import measure_in_subprocess, settings_as_dict

ONEDNN_SWITCH = "TF_ENABLE_ONEDNN_OPTS"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=100_000, help="generated training rows")
    parser.add_argument("--steps", type=int, default=150, help="timed steps per measurement")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default="",
                        help="the cases to measure, by their names in the report, separated by ';' (a name may "
                             "hold commas); default: every case")


def cases(start: dict, num_cpus: int, openmp: bool) -> dict:
    """Pure: case name -> (settings, extra environment, read by this build)."""
    every_vcpu = max(2, num_cpus)
    return {
        "default": (start, {}, True),
        f"OMP_NUM_THREADS={every_vcpu}": ({**start, "omp_num_threads": every_vcpu}, {}, openmp),
        f"OMP_NUM_THREADS={every_vcpu}, compact, KMP_BLOCKTIME=200": (
            {**start, "omp_num_threads": every_vcpu, "kmp_affinity": cpu.DEFAULT_KMP_AFFINITY,
             "kmp_blocktime": 200}, {}, openmp),
        f"intra_op_threads={every_vcpu}": ({**start, "intra_op_threads": every_vcpu}, {}, True),
        "inter_op_threads=1": ({**start, "inter_op_threads": 1}, {}, True),
        f"{ONEDNN_SWITCH}=0": (start, {ONEDNN_SWITCH: "0"}, True),
    }


def chosen(known: dict, names: str) -> dict:
    """Pure: of `known` cases, those `names` (';'-separated) names, the default always first;
    every case where none are named. An unknown name is refused with the list."""
    wanted = [name.strip() for name in names.split(";") if name.strip()]
    unknown = [name for name in wanted if name not in known]
    if unknown:
        raise SystemExit(f"trainer bench settings --cases: no case named {'; '.join(unknown)}; choose among: "
                         f"{'; '.join(known)}")
    return {name: case for name, case in known.items() if not wanted or name == "default" or name in wanted}


def run(args: argparse.Namespace) -> dict:
    from trainer.contract.job import read_job
    from trainer.data import datagen
    from trainer.local.runner import LocalJob

    with tempfile.TemporaryDirectory(prefix="trainer-bench-settings-") as folder:
        data = datagen.generate(os.path.join(folder, "data"), args.rows, 0, files=2)
        job = read_job(LocalJob({"training": [data["train"]]}, {}).lay_out(os.path.join(folder, "job"))["algo-1"])
        start = settings_as_dict(cpu.decide(job.hyperparameters, job.num_cpus, job.num_physical_cores))
        measure = measure_in_subprocess(job.base_dir, steps=args.steps)
        one_change_each = chosen(cases(start, job.num_cpus, job.tf_line.openmp), args.cases)
        rates = interleaved({name: (lambda settings=settings, environment=environment: measure(settings, environment))
                             for name, (settings, environment, _) in one_change_each.items()}, args.rounds)
    base = rates["default"]
    rows = [{"case": name, "samples_per_sec": round(rates[name], 1), "vs_default": round(rates[name] / base, 3),
             "read_by_this_build": read} for name, (_, _, read) in one_change_each.items()]
    return {"benchmark": "settings", "tensorflow_line": job.tf_line.describe(), "default": start, "rows": rows,
            "rows_of_data": args.rows, "steps": args.steps, "rounds": args.rounds}


def table(result: dict) -> str:
    lines = [result["tensorflow_line"], "",
             "setting | samples/s | vs default | read by this build", "--- | --- | --- | ---"]
    for row in result["rows"]:
        lines.append(f"{row['case']} | {row['samples_per_sec']:,.0f} | {row['vs_default']:.2f} | "
                     f"{'yes' if row['read_by_this_build'] else 'no'}")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    rows = result["rows"]
    return [Chart("settings", "CPU settings on this TensorFlow build (one changed at a time)", "samples/s",
                  [row["case"] for row in rows], [row["samples_per_sec"] for row in rows], highlight=["default"])]

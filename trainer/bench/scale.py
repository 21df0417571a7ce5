"""Scale up against scale out, per core: one host on 1 CPU, one host on N CPUs, and 2 hosts
of 1 CPU each in every multi-host mode, each simulated host on CPUs of its own
(`trainer local --host-cpus`, as separate instances would be).

Each case trains the default DeepFM on the same generated data through `trainer local`
(the same `train` as a job). One case is no mode: two one-host jobs at once, each on a CPU of
its own, sharing nothing but the machine. What they sum to is the most two hosts of one CPU
can train here with no exchange at all (the two CPUs share the machine's caches, memory and
clock, as separate instances do not), the ceiling every multi-host mode is read against.
Figures: the job's training samples/s from its metrics.json (the first step of each epoch,
graph tracing, excluded), the speed-up against 1 host x 1 CPU, the efficiency against the
ideal (N times for N CPUs), and the eval AUC against 1 host x 1 CPU's. The report names the mode the planner picks for the 2-host job (`auto`), and
checks what `trainer plan --probe` predicted for it (run first, while nothing else runs)
against what the cases measured. `--rounds N` runs the probes and the cases N times over,
alternating, and reports each case's median samples/s and each probe's median prediction:
one machine's speed drifts by a quarter, at times by half, between minutes, which one run
of each puts on the ratios.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

from trainer.bench.common import local_job_metrics
from trainer.data import datagen
from trainer.local import runner
from trainer.measure.probe import predicted_modes

# The modes that exchange between hosts, each measured and predicted by `trainer plan --probe`.
MULTI_HOST_MODES = tuple(predicted_modes())
HOSTS = 2  # of 1 CPU each, in the scaled-out cases
APART = "apart"  # not a mode: HOSTS one-host jobs at once, each on a CPU of its own


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--modes", default=",".join(MULTI_HOST_MODES),
                        help=f"the multi-host modes to run on {HOSTS} hosts x 1 CPU")
    parser.add_argument("--cpus", type=int, default=len(os.sched_getaffinity(0)),
                        help="CPUs of the scaled-up host (default: every CPU this process may use)")
    parser.add_argument("--train-rows", type=int, default=600_000)
    parser.add_argument("--eval-rows", type=int, default=60_000)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--feature-size", type=int, default=117581, help="ids of the generated data")
    parser.add_argument("--hp", action="append", default=[], type=runner.key_value, metavar="KEY=VALUE",
                        help="a hyperparameter for every case (repeatable)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run every case this many times, the cases alternating; each case's median samples/s")


def cases(args: argparse.Namespace) -> list[tuple[str, int, int, str]]:
    """(name, hosts, CPUs per host, distribution), the baseline first."""
    listed = [("1 host x 1 CPU, single", 1, 1, "single")]
    if args.cpus > 1:
        listed.append((f"1 host x {args.cpus} CPUs, single", 1, args.cpus, "single"))
    listed.append((f"{HOSTS} one-host jobs x 1 CPU at once, no exchange", HOSTS, 1, APART))
    for mode in args.modes.split(","):
        if mode not in MULTI_HOST_MODES:
            raise SystemExit(f"trainer bench scale: --modes: {mode!r} is not one of {', '.join(MULTI_HOST_MODES)}")
        listed.append((f"{HOSTS} hosts x 1 CPU, {mode}", HOSTS, 1, mode))
    return listed


def plan_command(channels: dict, hyperparameters: dict, hosts: int) -> list[str]:
    """`trainer plan` for `hosts` CPU hosts of 1 CPU each on the cases' data, as a user runs it."""
    command = [sys.executable, "-m", "trainer", "plan", "--hosts", str(hosts), "--host-cpus", "1"]
    command += [f"--channel={name}={path}" for name, paths in channels.items() for path in paths]
    return command + [f"--hp={key}={value}" for key, value in hyperparameters.items()]


def median_prediction(predictions: list[dict]) -> dict:
    """Pure: one mode's predictions, a round's each, as one: the median of each figure (a
    probe meets the machine's speed of its own minutes, as a case does)."""
    figures = ("samples_per_sec", "speedup", "one_host_samples_per_sec")
    median = {key: statistics.median(prediction[key] for prediction in predictions) for key in figures}
    return {"mode": predictions[0]["mode"], **median, "rounds": len(predictions),
            "speedup_by_round": [prediction["speedup"] for prediction in predictions]}


def _plan(command: list[str]) -> dict:
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    result = json.loads(done.stdout) if done.stdout.startswith("{") else {"error": done.stderr[-2000:]}
    if done.returncode:
        raise SystemExit(f"trainer bench scale: {' '.join(command)} failed: {result.get('error')}")
    return result


def run(args: argparse.Namespace) -> dict:
    listed = cases(args)
    if max(hosts * cpus for _, hosts, cpus, _ in listed) > len(os.sched_getaffinity(0)):
        raise SystemExit(f"trainer bench scale: needs {max(2, args.cpus)} CPUs of its own; "
                         f"this process may use {len(os.sched_getaffinity(0))}")
    with tempfile.TemporaryDirectory(prefix="trainer-bench-scale-") as folder:
        data = datagen.generate(os.path.join(folder, "data"), args.train_rows, args.eval_rows, files=4,
                                feature_size=args.feature_size)
        channels = {"training": [data["train"]], "evaluation": [data["eval"]]}
        common = {"num_epochs": str(args.epochs), **dict(args.hp)}
        command = plan_command(channels, common, HOSTS)
        choice = _plan(command)["plan"]["mode"]
        probed_modes = [mode for *_, mode in listed[1:] if mode in MULTI_HOST_MODES]
        # Rounds alternate the cases, so that the machine's slow and fast minutes fall on all of them;
        # each round's probes first, while nothing else runs (a mode's median is checked against its case's).
        runs, probed = [[] for _ in listed], []
        for round_index in range(max(1, args.rounds)):
            probed += [{**_plan(command + [f"--hp=distribution={mode}", "--probe"])["scaling"], "round": round_index}
                       for mode in probed_modes]
            for index, (name, hosts, cpus, mode) in enumerate(listed):
                case_folder = os.path.join(folder, f"case-{index}-{round_index}")
                if mode == APART:
                    runs[index].append(apart_metrics(channels, common, hosts, case_folder))
                    continue
                job = runner.LocalJob(channels, {**common, "distribution": mode}, hosts=hosts, host_cpus=cpus)
                runs[index].append(local_job_metrics(job, case_folder))
        rows = [row_of(case, case_runs) for case, case_runs in zip(listed, runs)]
    against_the_baseline(rows)
    predictions = [checked(median_prediction([scaling["prediction"] for scaling in probed
                                              if scaling["prediction"]["mode"] == mode]), rows)
                   for mode in probed_modes]
    return {"benchmark": "scale", "train_rows": args.train_rows, "epochs": args.epochs,
            "feature_size": args.feature_size, "hyperparameters": dict(args.hp), "planners_choice": choice,
            "probes": probed, "predictions": predictions, "cpus": os.cpu_count(), "rounds": max(1, args.rounds),
            "rows": rows}


def against_the_baseline(rows: list[dict]) -> None:
    """Fills in each measured row against the first (1 host x 1 CPU): its speed-up, efficiency
    against the ideal and AUC change; and each multi-host mode's samples/s against the
    no-exchange ceiling (APART), where that ran."""
    baseline = rows[0]
    ceiling = next((row for row in rows if row["mode"] == APART and "train_samples_per_sec" in row), None)
    for row in rows:
        if "train_samples_per_sec" not in row:
            continue
        if "train_samples_per_sec" in baseline:
            row["speedup"] = row["train_samples_per_sec"] / baseline["train_samples_per_sec"]
            row["efficiency"] = row["speedup"] / (row["hosts"] * row["cpus_per_host"])
            row["eval_auc_change"] = row["eval_auc"] - baseline["eval_auc"]
        if ceiling and row["hosts"] > 1 and row["mode"] != APART:
            row["of_ceiling"] = row["train_samples_per_sec"] / ceiling["train_samples_per_sec"]


def apart_metrics(channels: dict, hyperparameters: dict, jobs: int, folder: str) -> tuple[int, dict | None]:
    """`jobs` one-host jobs of `trainer local` at once, job i on this process's i-th CPU alone
    (its runner too); (the first failure's exit code, else their metrics summed: samples/s
    added up, the first job's model figures)."""
    from trainer.report import read_metrics

    cpus = sorted(os.sched_getaffinity(0))
    command = [sys.executable, "-m", "trainer", "local", "--host-cpus", "1"]
    command += [f"--channel={name}={path}" for name, paths in channels.items() for path in paths]
    command += [f"--hp={key}={value}" for key, value in {**hyperparameters, "distribution": "single"}.items()]
    started = []
    for index in range(jobs):
        job_dir = os.path.join(folder, f"job-{index}")
        with open(os.path.join(folder + f"-job-{index}.log"), "wb") as log:
            started.append((job_dir, subprocess.Popen(command + ["--job-dir", job_dir], stdout=log,
                                                      stderr=subprocess.STDOUT,
                                                      preexec_fn=lambda cpu=cpus[index]: os.sched_setaffinity(0, {cpu}))))
    codes = [process.wait() for _, process in started]
    metrics = [read_metrics(os.path.join(job_dir, "output", "data")) for job_dir, _ in started]
    failed = [code or 1 for code, metric in zip(codes, metrics) if code or metric is None]
    if failed:
        return failed[0], None
    return 0, {**metrics[0], "world_size": 1,
               "train_samples_per_sec": sum(metric["train_samples_per_sec"] for metric in metrics)}


def row_of(case: tuple[str, int, int, str], runs: list[tuple[int, dict | None]]) -> dict:
    """A case's row from its rounds' (exit code, metrics): the first failure's exit code, else
    the median samples/s and every round's (the model's figures are the same in every round)."""
    name, hosts, cpus, mode = case
    failed = [exit_code for exit_code, metrics in runs if exit_code or metrics is None]
    row = {"case": name, "hosts": hosts, "cpus_per_host": cpus, "mode": mode, "exit_code": failed[0] if failed else 0}
    if failed:
        return row
    metrics = runs[-1][1]
    rates = [run_metrics["train_samples_per_sec"] for _, run_metrics in runs]
    row.update({key: metrics[key] for key in ("eval_auc", "steps", "world_size")})
    row.update({"train_samples_per_sec": statistics.median(rates), "samples_per_sec_by_round": rates})
    return row


def checked(prediction: dict, rows: list[dict]) -> dict:
    """`trainer plan --probe`'s prediction for 2 hosts x 1 CPU beside what its mode and the
    baseline measured: the prediction's error, of the samples/s and of the speed-up."""
    measured = next((row for row in rows if row["hosts"] > 1 and row["mode"] == prediction["mode"]), {})
    one_host = next((row for row in rows if row["hosts"] == 1 and row["cpus_per_host"] == 1), {})
    out = {"mode": prediction["mode"], "predicted_samples_per_sec": prediction["samples_per_sec"],
           "predicted_speedup": prediction["speedup"],
           "probe_one_host_samples_per_sec": prediction["one_host_samples_per_sec"],
           "probe_rounds": prediction.get("rounds", 1)}
    if "speedup" in measured:
        out["measured_speedup"] = measured["speedup"]
        out["speedup_error"] = prediction["speedup"] / measured["speedup"] - 1
        out["samples_per_sec_error"] = prediction["samples_per_sec"] / measured["train_samples_per_sec"] - 1
    if "train_samples_per_sec" in one_host:
        out["one_host_error"] = prediction["one_host_samples_per_sec"] / one_host["train_samples_per_sec"] - 1
    return out


def table(result: dict) -> str:
    lines = ["case | samples/s | against 1 host x 1 CPU | efficiency | eval AUC | AUC change",
             "--- | --- | --- | --- | --- | ---"]
    for row in result["rows"]:
        name = row["case"] + (" (the planner's choice)" if row["hosts"] > 1 and row["mode"] == result["planners_choice"]
                              else "")
        if "train_samples_per_sec" not in row:
            lines.append(f"{name} | failed (exit {row['exit_code']}) | | | | |")
        elif "speedup" not in row:  # the baseline failed: nothing to compare with
            lines.append(f"{name} | {row['train_samples_per_sec']:,.0f} | | | {row['eval_auc']:.4f} |")
        else:
            lines.append(f"{name} | {row['train_samples_per_sec']:,.0f} | {row['speedup']:.2f}x | "
                         f"{row['efficiency']:.0%} | {row['eval_auc']:.4f} | {row['eval_auc_change']:+.4f}")
    lines.append(f"\nFor {HOSTS} CPU hosts of 1 CPU each the planner picks {result['planners_choice']} "
                 f"({result['train_rows']:,} rows, {result['feature_size']:,} ids, {result['epochs']} epochs).")
    ceiling = next((row for row in result["rows"] if row["mode"] == APART and "speedup" in row), None)
    if ceiling:
        line = (f"{HOSTS} one-host jobs at once, each on a CPU of its own, trained {ceiling['speedup']:.2f}x one host "
                f"alone: the most {HOSTS} hosts of 1 CPU reach on this machine with no exchange")
        chosen = next((row for row in result["rows"] if "of_ceiling" in row
                       and row["mode"] == result["planners_choice"]), None)
        lines.append(line + (f"; {chosen['mode']} reached {chosen['of_ceiling']:.0%} of it." if chosen else "."))
    if result.get("rounds", 1) > 1:
        lines.append(f"Samples/s: each case's median of {result['rounds']} rounds, the cases alternating.")
    for prediction in result.get("predictions", []):
        line = (f"`trainer plan --probe` predicted {prediction['predicted_samples_per_sec']:,.0f} samples/s for "
                f"{HOSTS} hosts x 1 CPU with {prediction['mode']}, {prediction['predicted_speedup']:.2f}x one host"
                + (f" (the median of {prediction['probe_rounds']} probes, one a round)"
                   if prediction.get("probe_rounds", 1) > 1 else ""))
        if "measured_speedup" in prediction:
            line += (f"; measured {prediction['measured_speedup']:.2f}x (error of the speed-up "
                     f"{prediction['speedup_error']:+.0%}, of the samples/s {prediction['samples_per_sec_error']:+.0%})")
        lines.append(line + ".")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    rows = [row for row in result["rows"] if "speedup" in row]
    return [Chart("scale", "Samples/s against 1 host x 1 CPU (each host on CPUs of its own)", "x one host, one CPU",
                  [row["case"] for row in rows], [row["speedup"] for row in rows],
                  note=f"The ideal is the number of CPUs: {HOSTS}.0 for {HOSTS} hosts x 1 CPU.",
                  highlight=[row["case"] for row in rows if row["hosts"] > 1 and row["mode"] == result["planners_choice"]])]

"""Thread tuning (P17): measure CPU settings on the job's own model and data, keep the best.

OpenMP reads OMP_NUM_THREADS and the KMP_* variables once, when TensorFlow loads, so each
candidate is measured in a fresh process (`python -m trainer tune probe`): a short
training of the job's model on the job's File-mode training data, the first steps left
out. The search changes one setting at a time from the job's own settings, keeping a
change only when it is faster, within a time budget; the winner is then measured again
side by side with the starting settings, and kept only if it is still faster by a margin
(one noisy probe must not move a job off sound defaults).

    trainer tune --channel training=data/train --seconds 120 [--batch-sizes 256,512,1024]

`tune_threads=true` runs the same search at the start of a job and trains with the result.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import sys
import time

from trainer.cpu import settings as cpu

log = logging.getLogger("trainer")

KEEP_MARGIN = 1.03  # the winner must beat the starting settings by 3% on the final, paired measure
PROBE_STEPS = 150
PROBE_TIMEOUT_SEC = 300


def knobs(num_cpus: int, cores: int, openmp: bool = True) -> list[tuple[str, list]]:
    """Pure: each setting and the values tried for it, in the order the search visits them.
    `openmp`: the build runs oneDNN on Intel OpenMP (the 2.14 line); stock TensorFlow (the
    2.21 line) reads only its own thread counts, so the OpenMP variables are not searched
    there (docs/performance.md, "CPU settings on each line", measured them)."""
    def distinct(*values):
        return sorted({max(1, v) for v in values})

    threads = [
        ("intra_op_threads", distinct(num_cpus, cores, num_cpus // 2)),
        ("inter_op_threads", distinct(1, 2, 4 if num_cpus >= 8 else 1)),
    ]
    return threads + [
        ("omp_num_threads", distinct(cores, num_cpus, 1)),
        ("kmp_affinity", [cpu.DEFAULT_KMP_AFFINITY, "disabled"]),
        ("kmp_blocktime", [0, 1, 200]),
    ] if openmp else threads


def settings_as_dict(settings: cpu.CpuSettings) -> dict:
    return {"intra_op_threads": settings.intra_op_threads, "inter_op_threads": settings.inter_op_threads,
            "omp_num_threads": settings.omp_num_threads, "kmp_affinity": settings.kmp_affinity,
            "kmp_blocktime": settings.kmp_blocktime}


def search(measure, start: dict, candidates: list[tuple[str, list]], deadline: float, clock=time.monotonic):
    """Pure but for `measure` (settings -> samples/sec): one setting at a time from `start`.
    Returns (best settings, trials as (settings, samples/sec) in the order measured)."""
    best, best_rate = dict(start), measure(start)
    trials = [(dict(start), best_rate)]
    for name, values in candidates:
        for value in values:
            if value == best[name]:
                continue
            if clock() >= deadline:
                return best, trials
            trial = {**best, name: value}
            rate = measure(trial)
            trials.append((trial, rate))
            if rate > best_rate:
                best, best_rate = trial, rate
    return best, trials


def confirm(measure, start: dict, best: dict, rounds: int = 2) -> tuple[dict, float, float]:
    """Measure both again, alternating; (the one to keep, its rate, the start's rate)."""
    if best == start:
        return start, 0.0, 0.0
    rates = {"start": [], "best": []}
    for _ in range(rounds):
        rates["start"].append(measure(start))
        rates["best"].append(measure(best))
    start_rate, best_rate = (sum(v) / len(v) for v in (rates["start"], rates["best"]))
    return (best, best_rate, start_rate) if best_rate > KEEP_MARGIN * start_rate else (start, start_rate, start_rate)


def probe_command(settings: dict, batch_size: int | None = None, steps: int = PROBE_STEPS,
                  cached: bool = False, one_host: bool = False) -> tuple[list, dict]:
    env = {"OMP_NUM_THREADS": str(settings["omp_num_threads"]), "KMP_AFFINITY": settings["kmp_affinity"],
           "KMP_BLOCKTIME": str(settings["kmp_blocktime"]), "KMP_SETTINGS": "0"}
    command = [sys.executable, "-m", "trainer", "tune", "probe", "--intra", str(settings["intra_op_threads"]),
               "--inter", str(settings["inter_op_threads"]), "--steps", str(steps)]
    if batch_size:
        command += ["--batch-size", str(batch_size)]
    return command + (["--cached"] if cached else []) + (["--one-host"] if one_host else []), env


def measure_in_subprocess(base_dir: str, batch_size: int | None = None, steps: int = PROBE_STEPS,
                          cached: bool = False, one_host: bool = False):
    from trainer.contract.job import BASE_DIR_ENV
    from trainer.measure.rates import json_result

    def measure(settings: dict, environment: dict | None = None) -> float:
        """`environment`: more variables for the probe's process (bench settings' oneDNN switch)."""
        command, env = probe_command(settings, batch_size, steps, cached, one_host)
        return json_result(command, {**os.environ, **env, **(environment or {}), BASE_DIR_ENV: base_dir},
                           PROBE_TIMEOUT_SEC, "tuning probe")["samples_per_sec"]
    return measure


@dataclasses.dataclass
class TuneOutcome:
    start: dict
    kept: dict
    kept_rate: float  # 0 when nothing beat the start in the search (no re-measure)
    start_rate: float
    trials: list  # (settings, samples/sec) in the order measured
    seconds: float


def tune_job(job, start: dict, seconds: float) -> TuneOutcome:
    """Search from `start` on the job in `job.base_dir`, then confirm the winner."""
    measure = measure_in_subprocess(job.base_dir)
    began = time.monotonic()
    best, trials = search(measure, start, knobs(job.num_cpus, job.num_physical_cores, job.tf_line.openmp),
                          began + seconds)
    kept, kept_rate, start_rate = confirm(measure, start, best)
    return TuneOutcome(start, kept, kept_rate, start_rate, trials, time.monotonic() - began)


def tuned(job, settings: cpu.CpuSettings, seconds: float) -> cpu.CpuSettings:
    """The job's CPU settings after a bounded search (for tune_threads=true)."""
    outcome = tune_job(job, settings_as_dict(settings), seconds)
    kept = outcome.kept
    log.info("tune_threads: %d settings measured in %.0f s; %s", len(outcome.trials), outcome.seconds,
             f"kept {kept} at {outcome.kept_rate:.0f} samples/s against {outcome.start_rate:.0f}"
             if kept != outcome.start else "the job's own settings stay (nothing beat them by 3%)")
    if kept == outcome.start:
        return settings
    sources = {**settings.sources, **{key: "tuned" for key in ("intra_op_threads", "inter_op_threads",
                                                              "OMP_NUM_THREADS", "KMP_AFFINITY", "KMP_BLOCKTIME")}}
    return dataclasses.replace(settings, intra_op_threads=kept["intra_op_threads"],
                               inter_op_threads=kept["inter_op_threads"], omp_num_threads=kept["omp_num_threads"],
                               kmp_affinity=kept["kmp_affinity"], kmp_blocktime=kept["kmp_blocktime"],
                               sources=sources)

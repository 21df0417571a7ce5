"""Which mode a job runs: the `distribution` hyperparameter, else the SDK's keys as AWS's
container reads them, else `auto`. Every mode declares what it can train (trainer.modes.base,
"What auto reads"); this module filters the modes by those declarations and takes the fastest
that fits, in one function (`auto`), whose decision table is tests/unit/test_auto.py.
"""
from __future__ import annotations

from trainer.errors import JobError
from trainer.plan import sdk
from trainer.plan.scaling import GRADIENTS, MODEL_AVERAGES, bytes_sent_per_step, deepfm_exchange


def choose(job, modes) -> tuple:
    """(mode, why) for `job` among `modes` (the registered ones)."""
    sdk.refuse_unsupported(job)
    by_name = {mode.name: mode for mode in modes}
    chosen = job.hyperparameters.distribution.strip().lower()
    if chosen not in by_name and chosen != "auto":
        raise JobError(f"hyperparameter 'distribution': {job.hyperparameters.distribution!r} is not accepted; "
                       f"accepted: one of {', '.join(['auto', *sorted(by_name)])}")
    if chosen != "auto":
        mode = by_name[chosen]
        if job.runs_script and not mode.runs_scripts:
            raise JobError(f"hyperparameter 'distribution': {chosen} builds the container's own model "
                           "in one process; a training script builds its own strategy: use "
                           f"{named(m for m in modes if m.runs_scripts)}")
        return mode, f"distribution={chosen} (hyperparameter)"
    return requested(job, modes) or auto(job, modes)


def requested(job, modes) -> tuple | None:
    """(mode, why) for the SDK's first key that asks for a mode, in AWS's container's order;
    None where none does. A mode asked for on fewer hosts than it runs on gives way to what
    auto picks (AWS's container runs no parameter servers on one host)."""
    for key in sdk.MODE_KEYS:
        if not sdk.enabled(job, key):
            continue
        mode = next(mode for mode in modes if mode.sdk_key == key)
        if len(job.hosts) >= mode.min_hosts:
            return mode, f"{key}: {mode.describe(job)}"
        fallback, _ = auto(job, modes)
        return fallback, (f"{key} with {len(job.hosts)} host(s): {mode.name} runs on {mode.min_hosts} or more (AWS's "
                          f"container runs no {mode.name} on one host): {fallback.name}, {fallback.describe(job)}")
    return None


def auto(job, modes) -> tuple:
    """(mode, why): a training script runs as AWS's container runs one that asks for nothing
    (one process on every host); the container's own training runs the fastest mode (the
    lowest speed_rank, from `bench modes` and `bench scale`) that can train the job."""
    if job.runs_script:
        mode = next(mode for mode in modes if mode.script_default)
        return mode, ("a training script with no distribution: one process"
                      + (" on every host, each on its own, as in AWS's container" if len(job.hosts) > 1 else ""))
    ranked = sorted((mode for mode in modes if mode.speed_rank is not None), key=lambda mode: mode.speed_rank)
    passed_over = []
    for mode in ranked:
        why_not = misfit(mode, job)
        if why_not is None:
            why = f"{situation(job)}: {mode.name}, {mode.describe(job)}"
            return mode, why + "".join(f"; not {name}, faster where it fits: {reason}" for name, reason in passed_over)
        passed_over.append((mode.name, why_not))
    raise JobError(f"no distribution mode can train {situation(job)}: set the hyperparameter 'distribution'")


def misfit(mode, job) -> str | None:
    """Why `mode` cannot train `job` by what it declares, or None where it can."""
    hosts, gpus = len(job.hosts), job.num_gpus
    devices = hosts * max(1, gpus)  # a host without GPUs trains on its CPUs: one device
    if mode.in_process and hosts > 1:
        return "it runs on one host"
    if hosts < mode.min_hosts:
        return f"it runs on {mode.min_hosts} hosts or more"
    if devices < mode.min_devices:
        return "it needs several hosts or GPUs"
    if mode.max_devices is not None and devices > mode.max_devices:
        return f"it trains on {mode.max_devices} device(s), and this job has {devices}"
    if gpus and not mode.trains_on_gpus(job.tf_line):
        return f"it does not train on GPUs on the TensorFlow {job.tf_line.name} line"
    if mode.exchange == MODEL_AVERAGES:
        return _averaging_misfit(job)
    return None


def _averaging_misfit(job) -> str | None:
    """A mode that sends the whole model fits where that sends no more a step than the
    gradients of every step would: only the built-in DeepFM's size is known before it is built."""
    if not job.trains_builtin_model:
        return "it sends the whole model, and a hooks model's size is not known before it is built"
    averaged, stepped = averaged_and_stepped_bytes(job)
    if averaged > stepped:
        return (f"averaging the whole model every {job.hyperparameters.average_every_steps} steps would send "
                f"{averaged / 1e6:.2f} MB a step against {stepped / 1e6:.2f} MB of every step's gradients")
    return None


def averaged_and_stepped_bytes(job) -> tuple[float, float]:
    """What each host of `job` sends a step averaging the built-in DeepFM every
    average_every_steps, and all-reducing its gradients every step."""
    model, every = deepfm_exchange(job.hyperparameters), job.hyperparameters.average_every_steps
    return (bytes_sent_per_step(MODEL_AVERAGES, len(job.hosts), model, every),
            bytes_sent_per_step(GRADIENTS, len(job.hosts), model))


def situation(job) -> str:
    """The job as auto sees it: "2 CPU hosts, the built-in DeepFM, TensorFlow 2.14"."""
    hosts, gpus = len(job.hosts), job.num_gpus
    machines = (f"{hosts} host{'s' if hosts > 1 else ''} with {gpus} GPU{'s' if gpus > 1 else ''}"
                + (" each" if hosts > 1 else "") if gpus else f"{hosts} CPU host{'s' if hosts > 1 else ''}")
    model = "the built-in DeepFM" if job.trains_builtin_model else "a hooks model"
    return f"{machines}, {model}, TensorFlow {job.tf_line.name}"


def named(modes) -> str:
    """Modes named for a message: "a, b or c"."""
    names = sorted(mode.name for mode in modes)
    return " or ".join(filter(None, [", ".join(names[:-1]), names[-1]])) if names else "none"

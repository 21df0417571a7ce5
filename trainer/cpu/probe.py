"""The short measurements behind `trainer plan --probe` (trainer.plan.scaling predicts from
them), each in processes of its own:

- one host's step: samples/s of the job's model on as many of this machine's CPUs as one of
  the job's hosts has, with the CPU settings `train` gives it (the tuning probe,
  trainer.cpu.tune): on its first training batches from a cache (the step alone, as a job's
  epochs after the first run it), and reading and parsing its files as the first epoch does;
- the mode's step on two ranks: two Horovod ranks on this machine, each on CPUs of its own
  (a host's, where this machine has twice them), talking over TCP as hosts do, train the
  job's model on those cached batches as the mode does (its optimizer, its agreement on the
  step, its exchange: Horovod's gradients every step, local SGD's average every
  `average_every_steps`, trainer.modes), with the mode's cycle time; so the exchange is
  measured where it runs, on the CPUs that also compute the step.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys

from trainer.errors import JobError

log = logging.getLogger("trainer")

COMPUTE_STEPS = 300  # of the job's first batches, cached: the step as a job's epochs after the first run it
FIRST_PASS_STEPS = 150  # reading the job's files: a first epoch's step
PROBE_RANKS = 2
# Both ranks import TensorFlow, build and trace the model, then train (seconds); beyond this something hangs.
EXCHANGE_TIMEOUT_SEC = 180


@contextlib.contextmanager
def on_cpus(count: int):
    """This process (and what it starts meanwhile) on its first `count` allowed CPUs."""
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, set(sorted(allowed)[:count]))
    try:
        yield
    finally:
        os.sched_setaffinity(0, allowed)


def step_samples_per_sec(job, cpus: int, steps: int = COMPUTE_STEPS, cached: bool = True) -> float:
    """One host's samples/s on `cpus` of this machine's CPUs, with the settings `train` gives
    it: on its first batches from a cache, or (`cached` False) reading its files."""
    from trainer.cpu.tune import measure_in_subprocess, settings_as_dict

    with on_cpus(cpus):
        return measure_in_subprocess(job.base_dir, steps=steps, cached=cached)(settings_as_dict(rank_settings(job, cpus)))


def rank_settings(job, cpus: int):
    """The CPU settings of a job's one process on a host of `cpus` CPUs (trainer.cpu.settings)."""
    from trainer.cpu import settings as cpu

    return cpu.decide(job.hyperparameters, cpus, min(cpus, job.num_physical_cores))


def one_host_compute(job, plan):
    """One host's step (trainer.plan.scaling.Compute), and the CPUs it was measured on."""
    from trainer.plan.scaling import Compute

    cpus = min(job.num_cpus, len(os.sched_getaffinity(0)))
    cached = step_samples_per_sec(job, cpus)
    first_pass = step_samples_per_sec(job, cpus, FIRST_PASS_STEPS, cached=False)
    return Compute(cached, first_pass, first_pass_share(job.hyperparameters, plan.input_mode)), cpus


def first_pass_share(hp, input_mode: str) -> float:
    """Pure: of a job's steps, the share that reads its files: a File-mode input is cached
    after the first epoch (trainer.data.pipeline; one larger than its share of memory is not,
    which this leaves out), a Pipe-mode input is read from its FIFO every epoch."""
    caches = input_mode == "File" and hp.cache_input != "false"
    return 1.0 / max(1, hp.num_epochs) if caches else 1.0


def exchange_command(job, mode: str, rank_cpus: int) -> tuple[list[str], dict]:
    """mpirun of the probe's two ranks on this machine, each on `rank_cpus` CPUs of its own,
    training as `mode` does, with the environment the ranks of the job get in `mode` (its
    cycle time, the CPU settings of a host of `rank_cpus` CPUs)."""
    from trainer import modes
    from trainer.plan.mpi import YIELD_WHEN_IDLE, horovod_env

    env = {**horovod_env(job, 1, modes.get(mode).cpu_cycle_time_ms), **rank_settings(job, rank_cpus).environment(),
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    command = ["mpirun", "--allow-run-as-root", "-np", str(PROBE_RANKS), "--host", f"localhost:{PROBE_RANKS}",
               "--bind-to", "none", *YIELD_WHEN_IDLE, "-mca", "btl_vader_single_copy_mechanism", "none",
               # Over TCP, as ranks on different hosts talk: not through this machine's shared memory.
               "-mca", "btl", "tcp,self"]
    for name in sorted(env):
        command += ["-x", name]
    return command + [sys.executable, "-m", "trainer", "plan", "--exchange-rank", mode,
                      "--exchange-cpus", str(rank_cpus)], env


def measure_exchange(job, mode: str, rank_cpus: int, alone_seconds: float):
    """`mode`'s step on two ranks of `rank_cpus` CPUs each and the bytes it sends
    (trainer.plan.scaling.Exchange); `alone_seconds`: one rank's step alone on as many CPUs."""
    from trainer.contract.job import BASE_DIR_ENV
    from trainer.plan.scaling import Exchange

    command, env = exchange_command(job, mode, rank_cpus)
    try:
        done = subprocess.run(command, env={**os.environ, **env, BASE_DIR_ENV: job.base_dir}, capture_output=True,
                              text=True, timeout=EXCHANGE_TIMEOUT_SEC)
    except subprocess.TimeoutExpired as err:
        raise JobError(f"the probe of the mode's step (2 Horovod ranks on this machine) did not end within "
                       f"{EXCHANGE_TIMEOUT_SEC} s") from err
    except FileNotFoundError as err:
        raise JobError("--probe starts two Horovod ranks with OpenMPI's mpirun, which is not on this machine's PATH: "
                       "run it in the image, or after ./build.sh setup (which installs OpenMPI)") from err
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        errors = [line for line in done.stderr.splitlines() if line.startswith(("trainer.errors.", "Traceback"))
                  or "Error: " in line]
        raise JobError(f"the probe of the mode's step (2 Horovod ranks on this machine) failed (exit {done.returncode})"
                       + (f": {errors[-1]}" if errors else "") + f"; its output ends: {done.stderr[-1500:]}")
    return Exchange(alone_seconds=alone_seconds, **json.loads(lines[-1]))


PREDICTED_MODES = ("horovod", "local_sgd")


def multi_host_mode(job) -> str:
    """What the planner picks for this job on two of its hosts."""
    import dataclasses

    from trainer.plan.planner import choose_mode

    mode, _ = choose_mode(dataclasses.replace(job, hosts=(job.current_host, f"{job.current_host}-2")))
    return mode.name if mode.name in PREDICTED_MODES else "horovod"


def scaling_of(job, plan) -> dict:
    """--probe: the measurements on this machine and what they predict for the job's hosts
    (for one host: two) against one host."""
    from trainer.plan import scaling
    from trainer.pricing import price_of

    if job.num_gpus:  # on either line
        raise JobError("--probe measures CPU hosts; this job has GPUs")
    if not job.tf_line.horovod:
        raise JobError(f"--probe measures the exchange with Horovod, which the {job.tf_line.name} line does not "
                       "have: run it on the 2.14 line, or compare modes with `trainer bench scale`")
    # A one-host job is predicted as the planner would run it on two hosts.
    mode = plan.mode if plan.mode in PREDICTED_MODES else multi_host_mode(job)
    compute, cpus = one_host_compute(job, plan)
    hosts, batch = max(2, len(job.hosts)), job.hyperparameters.batch_size
    # Each rank on CPUs of its own, as many as a host's where this machine has twice them.
    rank_cpus = max(1, min(cpus, len(os.sched_getaffinity(0)) // PROBE_RANKS))
    alone = batch / (compute.cached_samples_per_sec if rank_cpus == cpus else step_samples_per_sec(job, rank_cpus))
    exchange = measure_exchange(job, mode, rank_cpus, alone)
    price = price_of(job.instance_type, 1, job.hyperparameters.price_per_hour)
    prediction = scaling.predict(hosts, batch, compute, exchange, job.instance_type, price.per_instance_hour, mode,
                                 job.hyperparameters.average_every_steps)
    measured = {"compute_cpus": cpus, "one_host_cached_samples_per_sec": round(compute.cached_samples_per_sec, 1),
                "one_host_first_pass_samples_per_sec": round(compute.first_pass_samples_per_sec, 1),
                "first_pass_share": round(compute.first_pass_share, 4),
                "compute_seconds_per_step": round(batch / compute.cached_samples_per_sec, 6),
                "rank_cpus": rank_cpus, "two_rank_step_seconds": round(exchange.step_seconds, 6),
                "one_rank_alone_step_seconds": round(exchange.alone_seconds, 6),
                "exchange_seconds_per_step": round(exchange.seconds_per_step, 6),
                "dense_bytes_per_step": exchange.dense_bytes, "sparse_bytes_per_step": exchange.sparse_bytes,
                "variable_bytes": exchange.variable_bytes}
    notes = []
    if cpus < job.num_cpus:
        notes.append(f"one host's step was measured on {cpus} CPU(s), this machine's, not the job's {job.num_cpus}")
    if rank_cpus < cpus:
        notes.append(f"the exchange was measured between ranks of {rank_cpus} CPU(s) each (this machine has fewer than "
                     f"{PROBE_RANKS * cpus}); on hosts of {cpus} it shares a rank's CPUs less, so it likely costs less "
                     "than predicted")
    if prediction.network_seconds_per_step is None:
        notes.append(f"the network bandwidth of {job.instance_type} is not known: the time on the wire is left out")
    if plan.processes_per_host > 1:
        notes.append(f"the job runs {plan.processes_per_host} processes per host; the probe measures one per host, "
                     "with the host's CPUs")
    if plan.mode != mode:
        notes.append(f"the plan runs {plan.mode}; the prediction is for {mode} on {hosts} hosts (of the modes the "
                     "probe measures, horovod and local_sgd: what the planner picks for them, else horovod)")
    return {"measured": measured, "prediction": prediction.to_dict(), "price": price.source, "notes": notes}


def log_prediction(job, plan) -> None:
    """probe_scaling: the prediction in the job's log, before training. A job the probe
    cannot measure is told why in the log, and trains on: the prediction is advice."""
    try:
        if job.runs_script:
            raise JobError("it measures the container's model; a training script's model is the script's own")
        scaling = scaling_of(job, plan)
    except JobError as err:
        log.warning("probe_scaling: not measured: %s", err)
        return
    measured = scaling["measured"]
    log.info("probe_scaling: %s (measured on this host: one host's step %.1f ms, the exchange adds %.1f ms a step; "
             "%s)", scaling["prediction"]["verdict"], 1000 * measured["compute_seconds_per_step"],
             1000 * measured["exchange_seconds_per_step"], scaling["price"])
    for note in scaling["notes"]:
        log.info("probe_scaling: %s", note)


def exchange_rank(mode_name: str, cpus: int) -> int:
    """One of the probe's two ranks (under mpirun), on `cpus` CPUs of its own: trains the
    job's model on its first batches, cached, as `mode_name` does on two hosts; rank 0 prints
    the step's seconds and bytes as JSON."""
    from trainer.contract.job import base_dir_from_env, read_job
    from trainer.cpu import settings as cpu
    from trainer.plan.mpi import rank_from_launcher

    rank = rank_from_launcher()
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(allowed[rank * cpus:(rank + 1) * cpus]) or {allowed[rank % len(allowed)]})
    job = read_job(base_dir_from_env())
    job.tf_line.use_own_keras()
    import tensorflow as tf

    cpu.apply_tensorflow_threads(rank_settings(job, cpus))  # its OpenMP variables came with mpirun's -x

    from trainer.cpu.measure import cached_first_batches, fit_rate, jobs_model_and_input
    from trainer.models.optimizers import build_optimizer_state
    from trainer.training.stop import StopRequest

    plan, runtime = _two_host_runtime(job, mode_name, rank)
    runtime.start()  # Horovod's init, before TensorFlow runs anything
    _, hooks, model, dataset = jobs_model_and_input()  # both ranks on this host's first batches
    variables, gradients = _gradients_of_one_step(model, dataset)
    runtime.stop_request = StopRequest(f"probe rank {rank}", os.devnull)  # never asked: the flag stays 0
    optimizer = runtime.wrap_optimizer(hooks.optimizer_fn())
    model.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy(),
                  steps_per_execution=plan.steps_per_execution)
    build_optimizer_state(model.optimizer, model.trainable_variables)
    runtime.prepare(model, optimizer)
    batches = runtime.training_dataset(cached_first_batches(dataset).repeat())
    batch = plan.batch_size
    fit_rate(model, batches, 2 * plan.steps_per_execution, batch)  # trace, fill the first window
    samples_per_sec = fit_rate(model, batches, COMPUTE_STEPS, batch)  # the same steps on both ranks
    if rank == 0:
        dense = [g for g in gradients if not isinstance(g, tf.IndexedSlices)]
        sparse = [g for g in gradients if isinstance(g, tf.IndexedSlices)]
        size = lambda t: int(tf.size(t)) * t.dtype.size  # noqa: E731
        print(json.dumps({"step_seconds": batch / samples_per_sec, "dense_bytes": sum(size(g) for g in dense),
                          "sparse_bytes": sum(size(g.values) + size(tf.cast(g.indices, tf.int64)) for g in sparse),
                          "variable_bytes": sum(size(v) for v in variables)}), flush=True)
    return 0


def _two_host_runtime(job, mode_name: str, rank: int):
    """The plan of `job` on two hosts in `mode_name`, and that mode's runtime for `rank` of it."""
    import dataclasses

    from trainer import modes
    from trainer.plan.planner import make_plan

    # One rank per host, with the host's CPUs: what the probe's ranks stand for.
    hp = job.hyperparameters.with_value("distribution", mode_name).with_value("processes_per_host", 1)
    two = dataclasses.replace(job, hosts=(job.current_host, f"{job.current_host}-2"), hyperparameters=hp)
    plan = make_plan(two)
    return plan, modes.get(mode_name).runtime(plan, plan.process(rank), hp)


def _gradients_of_one_step(model, dataset):
    """The model's trainable variables, and their gradients on the first batch of `dataset`."""
    import tensorflow as tf

    features, label = next(iter(dataset))
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.BinaryCrossentropy()(label, model(features, training=True))
    return model.trainable_variables, tape.gradient(loss, model.trainable_variables)

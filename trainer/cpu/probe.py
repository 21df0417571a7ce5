"""The two short measurements behind `trainer plan --probe` (trainer.plan.scaling predicts
from them), each in processes of its own:

- compute: samples/s of the job's model on its first training batches, cached, on as many
  of this machine's CPUs as one of the job's hosts has, with the CPU settings `train` gives
  it (the tuning probe, trainer.cpu.tune);
- exchange: two Horovod ranks on this machine, each on a CPU of its own, run the
  collectives of one training step over and over: the ranks' agreement on the step
  (trainer.training.equal_steps) and the step's real gradients (computed once on a batch of
  the job's data) all-reduced as Horovod's DistributedOptimizer does (dense tensors
  averaged, the embedding's rows and ids all-gathered); then local SGD's agreement and
  average of every trainable variable (trainer.modes.local_sgd).
"""
from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time

from trainer.errors import JobError

COMPUTE_STEPS = 300  # of the job's first batches, cached: the step as a job's epochs after the first run it
EXCHANGE_WARMUP_STEPS = 20
EXCHANGE_STEPS = 300
AVERAGES = 30  # of the whole model: each a few MB at the built-in model's defaults
PROBE_RANKS = 2
# Both processes import TensorFlow and build the model (seconds); beyond this something hangs.
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


def compute_samples_per_sec(job) -> tuple[float, int]:
    """(samples/s of one host's training step, the CPUs it was measured on)."""
    from trainer.cpu import settings as cpu
    from trainer.cpu.tune import measure_in_subprocess, settings_as_dict

    cpus = min(job.num_cpus, len(os.sched_getaffinity(0)))
    settings = settings_as_dict(cpu.decide(job.hyperparameters, cpus, min(cpus, job.num_physical_cores)))
    with on_cpus(cpus):
        return measure_in_subprocess(job.base_dir, steps=COMPUTE_STEPS, cached=True)(settings), cpus


def exchange_command(job, mode: str) -> tuple[list[str], dict]:
    """mpirun of the exchange probe's ranks on this machine, with the environment the ranks of
    the job get in `mode` (its cycle time)."""
    from trainer import modes
    from trainer.plan.mpi import YIELD_WHEN_IDLE, horovod_env

    env = {**horovod_env(job, 1, modes.get(mode).cpu_cycle_time_ms),
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    command = ["mpirun", "--allow-run-as-root", "-np", str(PROBE_RANKS), "--host", f"localhost:{PROBE_RANKS}",
               "--bind-to", "none", *YIELD_WHEN_IDLE, "-mca", "btl_vader_single_copy_mechanism", "none"]
    for name in sorted(env):
        command += ["-x", name]
    return command + [sys.executable, "-m", "trainer", "plan", "--exchange-rank"], env


def measure_exchange(job, mode: str):
    """The job's exchange per step (trainer.plan.scaling.Exchange), measured by two ranks as
    `mode` runs them."""
    from trainer.contract.job import BASE_DIR_ENV
    from trainer.plan.scaling import Exchange

    command, env = exchange_command(job, mode)
    try:
        done = subprocess.run(command, env={**os.environ, **env, BASE_DIR_ENV: job.base_dir}, capture_output=True,
                              text=True, timeout=EXCHANGE_TIMEOUT_SEC)
    except subprocess.TimeoutExpired as err:
        raise JobError(f"the exchange probe (2 Horovod ranks on this machine) did not end within "
                       f"{EXCHANGE_TIMEOUT_SEC} s") from err
    except FileNotFoundError as err:
        raise JobError("--probe starts two Horovod ranks with OpenMPI's mpirun, which is not on this machine's PATH: "
                       "run it in the image, or after ./build.sh setup (which installs OpenMPI)") from err
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        raise JobError(f"the exchange probe (2 Horovod ranks on this machine) failed (exit {done.returncode}): "
                       f"{done.stderr[-2000:]}")
    return Exchange(**json.loads(lines[-1]))


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

    if not job.tf_line.horovod:
        raise JobError(f"--probe measures the exchange with Horovod, which the {job.tf_line.name} line does not "
                       "have: run it on the 2.14 line, or compare modes with `trainer bench scale`")
    if job.num_gpus:
        raise JobError("--probe measures CPU hosts; this job has GPUs")
    # A one-host job is predicted as the planner would run it on two hosts.
    mode = plan.mode if plan.mode in PREDICTED_MODES else multi_host_mode(job)
    one_host, cpus = compute_samples_per_sec(job)
    exchange = measure_exchange(job, mode)
    hosts = max(2, len(job.hosts))
    price = price_of(job.instance_type, 1, job.hyperparameters.price_per_hour)
    prediction = scaling.predict(hosts, job.hyperparameters.batch_size, one_host, exchange, job.instance_type,
                                 price.per_instance_hour, mode, job.hyperparameters.average_every_steps)
    measured = {"compute_cpus": cpus, "exchange_seconds_per_step": round(exchange.seconds, 6),
                "dense_bytes_per_step": exchange.dense_bytes, "sparse_bytes_per_step": exchange.sparse_bytes,
                "average_seconds": round(exchange.average_seconds, 6), "variable_bytes": exchange.variable_bytes}
    notes = []
    if cpus < job.num_cpus:
        notes.append(f"one host's step was measured on {cpus} CPU(s), this machine's, not the job's {job.num_cpus}")
    if prediction.network_seconds_per_step is None:
        notes.append(f"the network bandwidth of {job.instance_type} is not known: the time on the wire is left out")
    if plan.mode != mode:
        notes.append(f"the plan runs {plan.mode}; the prediction is for {mode} on {hosts} hosts (of the modes the "
                     "probe measures, horovod and local_sgd: what the planner picks for them, else horovod)")
    return {"measured": measured, "prediction": prediction.to_dict(), "price": price.source, "notes": notes}


def exchange_rank() -> int:
    """One rank of the exchange probe (under mpirun): rank 0 prints the Exchange as JSON."""
    from trainer.plan.mpi import rank_from_launcher

    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {allowed[rank_from_launcher() % len(allowed)]})  # a CPU of its own, as on a host
    import horovod.tensorflow as hvd
    import tensorflow as tf

    hvd.init()
    variables, gradients = _gradients_of_one_step()
    dense = [g for g in gradients if not isinstance(g, tf.IndexedSlices)]
    sparse = [g for g in gradients if isinstance(g, tf.IndexedSlices)]

    @tf.function
    def one_step(dense, sparse):
        agreed = hvd.allreduce(tf.constant(1.0), op=hvd.Min, name="probe_agreement")
        with tf.control_dependencies([agreed]):  # the gradients' exchange follows the agreement, as in a step
            reduced = [hvd.allreduce(g, op=hvd.Average, name=f"probe_dense_{i}") for i, g in enumerate(dense)]
            gathered = [hvd.allreduce(g, op=hvd.Average, name=f"probe_sparse_{i}") for i, g in enumerate(sparse)]
        return reduced, [g.values for g in gathered]

    for _ in range(EXCHANGE_WARMUP_STEPS):
        one_step(dense, sparse)
    began = time.perf_counter()
    for _ in range(EXCHANGE_STEPS):
        one_step(dense, sparse)
    seconds = (time.perf_counter() - began) / EXCHANGE_STEPS

    @tf.function
    def one_average():
        agreed = hvd.allreduce(tf.constant(1.0), op=hvd.Min, name="probe_average_agreement")
        with tf.control_dependencies([agreed]):
            return hvd.grouped_allreduce([v.read_value() for v in variables], op=hvd.Average, name="probe_average")

    one_average()
    began = time.perf_counter()
    for _ in range(AVERAGES):
        one_average()
    average_seconds = (time.perf_counter() - began) / AVERAGES
    if hvd.rank() == 0:
        size = lambda t: int(tf.size(t)) * t.dtype.size  # noqa: E731
        print(json.dumps({"seconds": seconds, "dense_bytes": sum(size(g) for g in dense),
                          "sparse_bytes": sum(size(g.values) + size(g.indices) for g in sparse),
                          "average_seconds": average_seconds, "variable_bytes": sum(size(v) for v in variables)}),
              flush=True)
    return 0


def _gradients_of_one_step():
    """The job's model's trainable variables, and their gradients on one batch of this host's
    training data."""
    import tensorflow as tf

    from trainer.cpu.measure import jobs_model_and_input

    _, _, model, dataset = jobs_model_and_input()
    features, label = next(iter(dataset))
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.BinaryCrossentropy()(label, model(features, training=True))
    return model.trainable_variables, tape.gradient(loss, model.trainable_variables)

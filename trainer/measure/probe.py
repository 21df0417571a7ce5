"""The short measurements behind `trainer plan --probe` (trainer.plan.scaling predicts from
them), each in processes of its own:

- one host's step: samples/s of the job's model on as many of this machine's CPUs as one of
  the job's hosts has, with the CPU settings `train` gives it (the tuning probe,
  trainer.measure.tune): as a job's epochs after the first run it (a sample of its input from a
  cache, shuffled and batched every pass as an epoch is: EpochInput.later_epochs), and
  reading and parsing its files as the first epoch does;
- the mode's step on two hosts: the processes the mode runs on two hosts, started on this
  machine, those of each host on CPUs of its own (a host's, where this machine has twice
  them), talking over TCP as hosts do, train the job's model on such a sample as the mode
  does (trainer.modes: its runtime, optimizer, agreement on the step and exchange):
  Horovod's gradients every step and local SGD's average every `average_every_steps` (over
  MPI itself) between two ranks under mpirun; multi-worker mirrored's all-reduce between its
  two workers; parameter servers' reads and updates between the coordinator, two workers
  and two PS tasks. So the exchange is measured where it runs, on the CPUs that also compute
  the step.
"""
from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import time

from trainer.errors import JobError

log = logging.getLogger("trainer")

COMPUTE_STEPS = 300  # timed, as a job's epochs after the first run them (EpochInput.later_epochs)
FIRST_PASS_STEPS = 150  # reading the job's files: a first epoch's step
PROBE_RANKS = 2  # hosts whose processes the probe starts
# Every process imports TensorFlow, the trainers build and trace the model, then train
# (seconds; parameter servers' five processes the longest); beyond this something hangs.
EXCHANGE_TIMEOUT_SEC = 240
# A probe process started without mpirun: its index among the two-host plan's processes
# (its TF_CONFIG, in the environment, puts the cluster on this machine's ports).
PROCESS_ENV = "TRAINER_PROBE_PROCESS"


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
    """One host's samples/s on `cpus` of this machine's CPUs, the job as that host alone
    trains it (trainer.measure.rates.alone_on_this_host: not the mode's plan, which may step
    once a call), with the settings `train` gives it: as its epochs after the first run (a
    sample of its input, cached), or (`cached` False) reading its files."""
    from trainer.measure.tune import measure_in_subprocess, settings_as_dict

    with on_cpus(cpus):
        measure = measure_in_subprocess(job.base_dir, steps=steps, cached=cached, one_host=True)
        return measure(settings_as_dict(rank_settings(job, cpus)))


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
    training as `mode` does, with the environment the ranks of the job get in `mode` (Horovod's
    cycle time where it runs on Horovod, the CPU settings of a host of `rank_cpus` CPUs)."""
    from trainer import modes
    from trainer.plan.mpi import YIELD_WHEN_IDLE

    env = {**modes.get(mode).rank_environment(job, 1), **rank_settings(job, rank_cpus).environment(),
           "OMPI_MCA_btl_vader_single_copy_mechanism": "none"}
    command = ["mpirun", "--allow-run-as-root", "-np", str(PROBE_RANKS), "--host", f"localhost:{PROBE_RANKS}",
               "--bind-to", "none", *YIELD_WHEN_IDLE, "-mca", "btl_vader_single_copy_mechanism", "none",
               # Over TCP, as ranks on different hosts talk: not through this machine's shared memory;
               # on loopback, which every machine has (on all interfaces, a bridge a container engine
               # left down with an address, docker0, kept the ranks' all-reduce waiting forever).
               "-mca", "btl", "tcp,self", "-mca", "btl_tcp_if_include", "lo"]
    for name in sorted(env):
        command += ["-x", name]
    return command + _rank_command(mode, rank_cpus), env


def _rank_command(mode: str, rank_cpus: int) -> list[str]:
    return [sys.executable, "-m", "trainer", "plan", "--exchange-rank", mode, "--exchange-cpus", str(rank_cpus)]


def probe_processes(job, mode: str, rank_cpus: int) -> tuple[list[tuple[list[str], dict]], int]:
    """The processes the probe starts for `mode`, each (command, environment), and the index
    of the one that reports: one mpirun of two ranks for the modes whose ranks are MPI's; else
    every process of the mode's two-host plan, its TF_CONFIG's cluster on this machine's
    ports (trainer.modes: multi-worker mirrored's two workers; parameter servers' coordinator,
    two workers and two PS tasks)."""
    from trainer import modes

    if modes.get(mode).mpi_ranks:
        return [exchange_command(job, mode, rank_cpus)], 0
    _, plan = _two_host_job_and_plan(job, mode)
    cluster = _cluster_on_this_machine(plan.processes[0].tf_config["cluster"])
    settings = rank_settings(job, rank_cpus).environment()
    launches = [(_rank_command(mode, rank_cpus), {**settings, PROCESS_ENV: str(index),
                                                  "TF_CONFIG": json.dumps({**process.tf_config, "cluster": cluster})})
                for index, process in enumerate(plan.processes)]
    return launches, next(index for index, process in enumerate(plan.processes) if process.role == "chief")


def _cluster_on_this_machine(cluster: dict) -> dict:
    """`cluster` (a TF_CONFIG's) with each host:port on a free port of this machine's loopback."""
    import socket

    ports: dict[str, str] = {}
    for entry in (entry for entries in cluster.values() for entry in entries):
        with socket.socket() as probe_socket:  # a free port, released for the task to take
            probe_socket.bind(("127.0.0.1", 0))
            ports.setdefault(entry, f"127.0.0.1:{probe_socket.getsockname()[1]}")
    return {job: [ports[entry] for entry in entries] for job, entries in cluster.items()}


def measure_exchange(job, mode: str, rank_cpus: int, alone_seconds: float):
    """`mode`'s step on two hosts' processes of `rank_cpus` CPUs a host and the bytes it sends
    (trainer.plan.scaling.Exchange); `alone_seconds`: one rank's step alone on as many CPUs."""
    from trainer.contract.job import BASE_DIR_ENV
    from trainer.plan.scaling import Exchange

    launches, reporter = probe_processes(job, mode, rank_cpus)
    what = f"the probe of {mode}'s step on two hosts (its processes on this machine)"
    try:
        code, output, errors = _run_until_reported(launches, reporter, {**os.environ, BASE_DIR_ENV: job.base_dir})
    except subprocess.TimeoutExpired as err:
        raise JobError(f"{what} did not end within {EXCHANGE_TIMEOUT_SEC} s") from err
    except FileNotFoundError as err:
        raise JobError("--probe starts two Horovod ranks with OpenMPI's mpirun, which is not on this machine's PATH: "
                       "run it in the image, or after ./build.sh setup (which installs OpenMPI)") from err
    lines = [line for line in output.splitlines() if line.startswith("{")]
    if code or not lines:
        causes = [line for line in errors.splitlines() if line.startswith(("trainer.errors.", "Traceback"))
                  or "Error: " in line]
        raise JobError(f"{what} failed (exit {code})" + (f": {causes[-1]}" if causes else "")
                       + f"; its output ends: {errors[-1500:]}")
    return Exchange(alone_seconds=alone_seconds, **json.loads(lines[-1]))


def _first_end(processes: list, reporter: int, deadline: float) -> int:
    """The reporter's exit code once it ends, or the code of another process that failed
    first (the reporter would wait for it until the deadline)."""
    while True:
        code = processes[reporter].poll()
        if code is not None:
            return code
        failed = [process.returncode for process in processes if process.poll()]
        if failed:
            return failed[0]
        if time.monotonic() > deadline:
            raise subprocess.TimeoutExpired(processes[reporter].args, EXCHANGE_TIMEOUT_SEC)
        time.sleep(0.2)


def _run_until_reported(launches: list, reporter: int, environment: dict) -> tuple[int, str, str]:
    """Run the probe's processes until the reporting one ends (the others, servers, are
    stopped then): its exit code, its output, and the error output of it and of the others."""
    import tempfile

    with contextlib.ExitStack() as stack:
        files = [(stack.enter_context(tempfile.TemporaryFile("w+")), stack.enter_context(tempfile.TemporaryFile("w+")))
                 for _ in launches]
        processes = []
        try:
            for (command, env), (out, err) in zip(launches, files):
                processes.append(subprocess.Popen(command, env={**environment, **env}, stdout=out, stderr=err,
                                                  text=True))
            code = _first_end(processes, reporter, time.monotonic() + EXCHANGE_TIMEOUT_SEC)
        finally:
            for process in processes:
                if process.poll() is None:
                    process.kill()
                    process.wait()
        text = []
        for out, err in files:
            out.seek(0), err.seek(0)
            text.append((out.read(), err.read()))
    # The reporter's errors last: the end of the message is the reporter's own.
    errors = "".join(err for index, (_, err) in enumerate(text) if index != reporter) + text[reporter][1]
    return code, text[reporter][0], errors


def predicted_modes() -> list[str]:
    """The modes whose exchange between hosts the probe measures: those that declare one."""
    from trainer import modes

    return [mode.name for mode in modes.all_modes() if mode.exchange]


def multi_host_mode(job) -> str:
    """What the planner picks for this job on two of its hosts."""
    import dataclasses

    from trainer.planner.planner import choose_mode

    mode, _ = choose_mode(dataclasses.replace(job, hosts=(job.current_host, f"{job.current_host}-2")))
    return mode.name


def scaling_of(job, plan) -> dict:
    """--probe: the measurements on this machine and what they predict for the job's hosts
    (for one host: two) against one host."""
    from trainer import modes
    from trainer.plan import scaling
    from trainer.pricing import price_of

    if job.num_gpus:  # on either line
        raise JobError("--probe measures CPU hosts; this job has GPUs")
    # A one-host job is predicted as the planner would run it on two hosts.
    mode = plan.mode if len(job.hosts) > 1 else multi_host_mode(job)
    if mode not in predicted_modes():
        raise JobError(f"--probe measures {', '.join(predicted_modes())}; this job runs {mode}")
    compute, cpus = one_host_compute(job, plan)
    hosts, batch = max(2, len(job.hosts)), job.hyperparameters.batch_size
    # Each rank on CPUs of its own, as many as a host's where this machine has twice them.
    rank_cpus = max(1, min(cpus, len(os.sched_getaffinity(0)) // PROBE_RANKS))
    alone = batch / (compute.cached_samples_per_sec if rank_cpus == cpus else step_samples_per_sec(job, rank_cpus))
    exchange = measure_exchange(job, mode, rank_cpus, alone)
    price = price_of(job.instance_type, 1, job.hyperparameters.price_per_hour)
    prediction = scaling.predict(hosts, batch, compute, exchange, job.instance_type, price.per_instance_hour,
                                 modes.get(mode),
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
        notes.append(f"the plan runs {plan.mode} on one host; the prediction is for {mode}, what the planner picks "
                     f"for {hosts} hosts")
    if modes.get(mode).exchange == scaling.SERVER_READS:
        notes.append("with parameter servers each worker steps on its own, and the first host's coordinator "
                     "shares its CPUs (as it does in the job)")
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
    """One of the probe's processes (probe_processes), on the `cpus` CPUs of its host: a
    trainer trains the job's model on a sample of its input, cached, as `mode_name` does on two
    hosts, and the one that reports (the chief) prints the step's seconds and bytes as JSON;
    a parameter-server job's PS and worker tasks serve until the probe stops them."""
    import dataclasses

    from trainer import modes
    from trainer.contract.job import base_dir_from_env, read_job
    from trainer.cpu import settings as cpu
    from trainer.plan.types import LaunchKind

    job = read_job(base_dir_from_env())
    two, plan = _two_host_job_and_plan(job, mode_name)
    process = _this_process(plan)
    host = plan.hosts.index(process.host)
    allowed = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, set(allowed[host * cpus:(host + 1) * cpus]) or {allowed[host % len(allowed)]})
    job.tf_line.use_own_keras()
    settings = rank_settings(job, cpus)
    cpu.apply_tensorflow_threads(settings)  # its OpenMP variables came with its environment
    if plan.launch.kind is LaunchKind.PARAMETER_SERVER and process.role in ("ps", "worker"):  # as the launch does
        from trainer.modes.parameter_server import serve_ps_task

        serve_ps_task(dataclasses.replace(job, num_cpus=cpus), process, settings)  # until the probe stops it
        return 0
    runtime = modes.get(mode_name).runtime(plan, process, two.hyperparameters)
    runtime.start()  # Horovod's init, a strategy's cluster: before TensorFlow runs anything
    step_seconds, variables, gradients = _train(runtime, two, plan, mode_name)
    if process.role == "chief":
        import tensorflow as tf

        dense = [g for g in gradients if not isinstance(g, tf.IndexedSlices)]
        sparse = [g for g in gradients if isinstance(g, tf.IndexedSlices)]
        size = lambda t: int(tf.size(t)) * t.dtype.size  # noqa: E731
        print(json.dumps({"step_seconds": step_seconds, "dense_bytes": sum(size(g) for g in dense),
                          "sparse_bytes": sum(size(g.values) + size(tf.cast(g.indices, tf.int64)) for g in sparse),
                          "variable_bytes": sum(size(v) for v in variables)}), flush=True)
    return 0


def _train(runtime, two, plan, mode_name: str) -> tuple[float, list, list]:
    """The job's model trained under `runtime` (of `two`, the job on two hosts, and its
    `plan`) as its epochs after the first run: each trainer's step in seconds, and the model's
    trainable variables and their gradients on one batch."""
    import tensorflow as tf

    from trainer.measure.rates import jobs_training_input, later_epochs_rate
    from trainer.models.optimizers import build_optimizer_state
    from trainer.training.stop import StopRequest

    _, hooks, training = jobs_training_input()  # every trainer on a sample of this host's input
    batch = plan.batch_size
    with runtime.scope():
        model = hooks.model_fn()
        optimizer = runtime.wrap_optimizer(hooks.optimizer_fn())
        model.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy(),
                      steps_per_execution=plan.steps_per_execution)
        build_optimizer_state(model.optimizer, model.trainable_variables)
    if not runtime.steps_in_lockstep:  # parameter servers: each worker steps on its own, called by the coordinator
        from trainer.training.inputs import Inputs

        variables, gradients = _gradients_of_one_step(hooks.model_fn(), training.dataset(0))  # sizes only
        # What every worker reads, on its own host (trainer.data.ps_worker_input), as in the job.
        worker = next(process for process in plan.processes if process.role == "worker")
        worker_input = Inputs.training(two, plan, worker, hooks, batch, on_ps_worker=True)
        return _coordinated_step_seconds(runtime, model, worker_input, plan), variables, gradients
    variables, gradients = _gradients_of_one_step(model, training.dataset(0))
    runtime.stop_request = StopRequest(f"probe {runtime.process.name}", os.devnull)  # never asked: the flag stays 0
    runtime.prepare(model, optimizer)
    rate = later_epochs_rate(model, runtime.training_dataset, training, COMPUTE_STEPS, batch,  # the same on both
                             callbacks=runtime.callbacks())
    return batch / rate, variables, gradients


def _coordinated_step_seconds(runtime, model, worker_input, plan) -> float:
    """Parameter servers: each worker's step, from the coordinator's calls to both workers
    (trainer.training.coordinated, as the job runs them) as the job's epochs after the
    first run (a sample of each worker's input, cached: EpochInput.later_epochs)."""
    from trainer.training.coordinated import CoordinatedEpochs

    workers, per_call = runtime.workers, plan.steps_per_execution
    # Timed from the round after each worker's first pass over its sample (which fills its
    # cache, EpochInput.later_epochs) and first call (which traces it).
    warm = workers * (COMPUTE_STEPS + per_call)
    epochs = CoordinatedEpochs(runtime.strategy, model, workers, per_call)
    marks = []

    class Rounds:  # what train_pass tells its callbacks, after each round of calls
        def on_train_batch_begin(self, index):
            pass

        def on_train_batch_end(self, index, logs=None):
            marks.append((time.perf_counter(), int(model.optimizer.iterations.numpy())))

    epochs.train_pass(lambda: worker_input.later_epochs(COMPUTE_STEPS).take(2 * COMPUTE_STEPS + per_call), Rounds())
    timed = [mark for mark in marks if mark[1] >= warm]
    if len(timed) < 2 or timed[-1][1] == timed[0][1]:
        raise JobError(f"parameter servers' probe: too few rounds of calls to time ({len(marks)})")
    (start, first), (end, last) = timed[0], timed[-1]
    return workers * (end - start) / (last - first)  # a step of each worker, the workers' steps side by side


def _two_host_job_and_plan(job, mode_name: str):
    """`job` on two hosts in `mode_name`, and its plan."""
    import dataclasses

    from trainer.planner.planner import make_plan

    # One rank per host, with the host's CPUs: what the probe's processes stand for.
    hp = job.hyperparameters.with_value("distribution", mode_name).with_value("processes_per_host", 1)
    two = dataclasses.replace(job, hosts=(job.current_host, f"{job.current_host}-2"), hyperparameters=hp)
    return two, make_plan(two)


def _this_process(plan):
    """This probe process's part of `plan`: its index, and its TF_CONFIG on this machine's
    ports, in its environment; else its rank under mpirun."""
    import dataclasses

    from trainer.plan.mpi import rank_from_launcher

    if PROCESS_ENV in os.environ:
        process = plan.processes[int(os.environ[PROCESS_ENV])]
        return dataclasses.replace(process, tf_config=json.loads(os.environ["TF_CONFIG"]))
    return plan.process(rank_from_launcher())


def _gradients_of_one_step(model, dataset):
    """The model's trainable variables, and their gradients on the first batch of `dataset`."""
    import tensorflow as tf

    features, label = next(iter(dataset))
    with tf.GradientTape() as tape:
        loss = tf.keras.losses.BinaryCrossentropy()(label, model(features, training=True))
    return model.trainable_variables, tape.gradient(loss, model.trainable_variables)

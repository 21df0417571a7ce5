"""Carry out the plan on this host: run the training process here, or start the ranks.

No decisions here: the plan says what to start (trainer.planner).
"""
from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
import threading
import time

from trainer import supervise, worker
from trainer.errors import JobError, Stopped
from trainer.planner import make_plan
from trainer.report import EXIT_JOB_ERROR, EXIT_STOPPED, AlreadyReported

log = logging.getLogger("trainer")
# How long the other hosts wait for the first host's coordinator to come up (it imports
# TensorFlow and connects to every task first).
COORDINATOR_STARTUP_SEC = 600


def run(job) -> dict | None:
    """Run this host's part of the job; returns the metrics when they are this process's."""
    plan = make_plan(job)
    log.info("distribution: %s (%s); %d training process(es) per host, world size %d, global batch %d, "
             "learning rate %g (x%g); %s", plan.mode, plan.reason, plan.processes_per_host, plan.world_size,
             plan.global_batch_size, plan.learning_rate, plan.learning_rate_scale, plan.sharding)
    kind = plan.launch.kind
    if kind == "in_process":
        return worker.run_process(job, plan, plan.on_host(job.current_host)[0])
    if kind == "mpirun":
        run_mpirun(job, plan)
        return read_metrics(job)
    if kind == "parameter_server":
        return run_parameter_server(job, plan)
    if kind == "sagemaker_mpi":
        run_sagemaker_mpi(job, plan)
        return read_metrics(job)
    raise ValueError(f"unknown launch kind {kind!r}")


def read_metrics(job) -> dict | None:
    """The metrics the chief wrote."""
    path = os.path.join(job.output_data_dir, "metrics.json")
    if not os.path.exists(path):
        return None
    with open(path) as f:
        return json.load(f)


def run_mpirun(job, plan) -> None:
    """mpirun on this host, without sshd: the ranks are `python -m trainer.worker`."""
    command = [sys.executable if part == "python" else part for part in plan.launch.command]
    log.info("starting %d ranks: %s", plan.world_size, " ".join(command))
    env = {**os.environ, **plan.launch.env, "SAGEMAKER_BASE_DIR": job.base_dir}
    mpirun = supervise.Supervised(command, env, stop_grandchildren=True)
    exit_code = mpirun.wait()
    if exit_code == 0:
        return
    reported = os.path.exists(os.path.join(job.output_dir, "failure"))
    if mpirun.stop_requested:
        if reported:
            raise AlreadyReported(EXIT_STOPPED)  # the ranks said where they stopped
        raise Stopped("stopped by SIGTERM; the ranks ended before saving a checkpoint")
    blamed = supervise.first_failed_rank(mpirun.output_tail)
    # A rank killed by a signal wrote nothing, and the others' errors are consequences.
    if blamed and (not reported or "signal" in blamed[1]):
        supervise.blame_first(job.output_dir, plan.process(blamed[0]).name, blamed[1])
        raise AlreadyReported(exit_code)
    if reported:
        raise AlreadyReported(exit_code)  # the failing rank said why
    raise JobError(f"mpirun exited with code {exit_code} and no rank reported why")


def run_sagemaker_mpi(job, plan) -> None:
    """Horovod across hosts through the SageMaker training toolkit's MPI runner: the first
    host waits for every host's sshd and runs mpirun; the others serve sshd until its
    ranks are done. For inside the image only (it preloads a gethostname library that
    reads /opt/ml's resourceconfig.json). The toolkit sets its own binding (none) and
    container options; ours (Horovod's knobs, the user's options) are added to them.
    """
    from sagemaker_training import mpi

    per_host = plan.processes_per_host
    entry = os.path.join(os.path.dirname(worker.__file__), "worker.py")
    env = {**plan.launch.env, "SAGEMAKER_BASE_DIR": job.base_dir}
    master = plan.hosts[0]
    if job.current_host != master:
        mpi.WorkerRunner(entry, [], env, per_host, master, job.current_host).run(wait=True)
        return
    options = " ".join(filter(None, [
        str(job.framework_params.get("sagemaker_mpi_custom_mpi_options", "") or ""),
        job.hyperparameters.mpi_options]))
    mpi.MasterRunner(entry, [], env, per_host, master, list(plan.hosts), options, job.network_interface,
                     instance_type=job.instance_type).run(wait=True)


def run_parameter_server(job, plan) -> dict | None:
    """Start this host's PS and worker tasks; on the first host also coordinate training.

    Other hosts serve until the coordinator is gone (its port closes), then stop their
    tasks, so no process outlives the job. A task that dies fails the host at once.
    """
    roles = [p.role for p in plan.on_host(job.current_host) if p.role in ("ps", "worker")]
    env = {**os.environ, "SAGEMAKER_BASE_DIR": job.base_dir}
    tasks = [subprocess.Popen([sys.executable, "-m", "trainer.worker", "--serve", role], env=env,
                              preexec_fn=supervise.die_with_parent)
             for role in roles]
    names = [f"{role} task on {job.current_host}" for role in roles]
    try:
        if plan.chief.host == job.current_host:
            threading.Thread(target=end_if_a_task_dies, args=(job, tasks, names), daemon=True).start()
            return worker.run_process(job, plan, plan.chief)
        wait_for_coordinator(plan, tasks, names, COORDINATOR_STARTUP_SEC)
        return None
    finally:
        ending.set()
        for task in tasks:
            task.terminate()
        for task in tasks:
            try:
                task.wait(timeout=10)
            except subprocess.TimeoutExpired:
                task.kill()


ending = threading.Event()  # set when this host's tasks are being stopped on purpose


def how_it_ended(task) -> str:
    code = task.returncode
    return f"was killed by signal {-code} ({supervise.signal_name(-code)})" if code < 0 else f"exited with code {code}"


def end_if_a_task_dies(job, tasks, names, poll_sec: float = 1.0) -> None:
    """On the coordinator's host: a PS or worker task that dies ends the job at once (the
    coordinator would otherwise wait for a lost worker to come back, or fail later with a
    consequence), naming the task first."""
    while not ending.wait(poll_sec):
        for task, name in zip(tasks, names):
            if task.poll() is not None and not ending.is_set():
                supervise.blame_first(job.output_dir, name, how_it_ended(task))
                sys.stdout.flush()
                os._exit(EXIT_JOB_ERROR)


def _port_open(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except OSError:
        return False


def wait_for_coordinator(plan, tasks, names, startup_timeout_sec: float, poll_sec: float = 1.0) -> None:
    address = plan.chief.tf_config["cluster"]["chief"][0]
    deadline = time.monotonic() + startup_timeout_sec
    seen = False
    while True:
        for task, name in zip(tasks, names):
            if task.poll() is not None:
                raise JobError(f"{name} {how_it_ended(task)}")
        up = _port_open(address)
        if seen and not up:
            log.info("the coordinator at %s is done; stopping this host's tasks", address)
            return
        if not seen and not up and time.monotonic() > deadline:
            raise JobError(f"the coordinator at {address} did not start within {startup_timeout_sec:.0f} s")
        seen = seen or up
        time.sleep(poll_sec)

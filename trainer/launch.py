"""Carry out the plan on this host: run the training process here, or start the ranks.

No decisions here: the plan says what to start (trainer.plan.planner).
"""
from __future__ import annotations

import logging
import os
import sys
import threading

from trainer import peers, script_launch, script_process, supervise, worker
from trainer.errors import JobError, PeerLost, Stopped
from trainer.plan.planner import make_plan
from trainer.report import EXIT_JOB_ERROR, EXIT_STOPPED, AlreadyReported, read_metrics

log = logging.getLogger("trainer")


def run(job) -> dict | None:
    """Run this host's part of the job; returns the metrics when they are this process's.

    On a multi-host job this host's status port answers from the start (the others wait for
    it), this host waits for the hosts the plan names, and at the end it publishes how its
    part ended, which the hosts that follow it read (trainer.peers).
    """
    plan = make_plan(job)
    log.info("entry point: %s", plan.entry)
    log.info("distribution: %s (%s); %d training process(es) per host, world size %d, global batch %d, "
             "learning rate %g (x%g); %s", plan.mode, plan.reason, plan.processes_per_host, plan.world_size,
             plan.global_batch_size, plan.learning_rate, plan.learning_rate_scale, plan.sharding)
    if len(plan.hosts) == 1:
        return launch_host(job, plan, None)
    status = peers.StatusServer(job.current_host, peers.STATUS_PORT)
    followers: tuple[str, ...] = ()  # hosts to tell how this one ended: once they have answered
    try:
        peers.wait_for(list(plan.peer_waits), job.hyperparameters.peer_wait_sec)
        if plan.leader == job.current_host or plan.watch_peers:
            followers = tuple(h for h in plan.hosts if h != job.current_host)
        metrics = launch_host(job, plan, status)
    except BaseException as err:
        status.finish(*final_state(err, job.output_dir), followers=followers)
        raise
    status.finish(peers.DONE, followers=followers)
    return metrics


def launch_host(job, plan, status) -> dict | None:
    kind = plan.launch.kind
    explain, cwd = None, None
    if job.runs_script:
        toolkit_env = script_process.toolkit_environment(job)
        script_launch.prepare(job, toolkit_env)
        # A script writes no failure file of its own: its rank's output says why it failed.
        explain, cwd = script_launch.mpirun_failure_writer(job, plan), job.entry_point.code_dir
    if kind == "in_process":
        return worker.run_process(job, plan, plan.on_host(job.current_host)[0])
    if kind == "script":
        script_launch.run(job, plan, toolkit_env)
        return None
    if kind == "mpirun":
        supervise.run_mpirun(job, plan, plan.launch.command, cwd=cwd, explain=explain)
        return read_metrics(job.output_data_dir)
    if kind == "parameter_server":
        return run_parameter_server(job, plan, status)
    if kind == "sagemaker_mpi":
        from trainer import toolkit_mpi  # the SageMaker training toolkit's MPI setup: in the image

        toolkit_mpi.run(job, plan, explain)
        return read_metrics(job.output_data_dir)
    raise ValueError(f"unknown launch kind {kind!r}")


def final_state(err: BaseException, output_dir: str) -> tuple[str, str]:
    """(state, reason) to publish for a host whose part ended with `err`."""
    if isinstance(err, AlreadyReported):  # the processes wrote the reason
        state = peers.STOPPED if err.exit_code == EXIT_STOPPED else peers.FAILED
        return state, first_failure_line(output_dir) or f"exit code {err.exit_code}"
    if isinstance(err, Stopped):
        return peers.STOPPED, str(err)
    return peers.FAILED, str(err) if isinstance(err, (JobError, PeerLost)) else f"{type(err).__name__}: {err}"


def first_failure_line(output_dir: str) -> str:
    try:
        with open(os.path.join(output_dir, "failure")) as f:
            return f.readline().strip()
    except OSError:
        return ""


def run_parameter_server(job, plan, status) -> dict | None:
    """Start this host's PS and worker tasks; on the first host also coordinate training.

    Other hosts serve until the coordinator's host says it has ended (or is lost), then
    stop their tasks, so no process outlives the job. A task that dies fails the host at once.
    """
    roles = [p.role for p in plan.on_host(job.current_host) if p.role in ("ps", "worker")]
    tasks = supervise.start_tasks(job, roles)
    names = [f"{role} task on {job.current_host}" for role in roles]
    ending = threading.Event()  # set when this host's tasks are being stopped on purpose
    try:
        if plan.chief.host == job.current_host:
            threading.Thread(target=end_if_a_task_dies, args=(job, plan, status, tasks, names, ending),
                             daemon=True).start()
            return worker.run_process(job, plan, plan.chief)

        def tasks_alive():
            for task, name in zip(tasks, names):
                if task.poll() is not None:
                    raise JobError(f"{name} {supervise.how_it_ended(task.returncode)}")

        # The tasks serve on after a SIGTERM: the coordinator saves its checkpoint through them.
        supervise.follow_leader(job, plan, f"the coordinator on {plan.leader}", alive=tasks_alive,
                                on_stop=lambda: log.warning("SIGTERM: this host's tasks serve until the "
                                                            "coordinator has saved"))
        return None
    finally:
        ending.set()
        supervise.end_tasks(tasks)


def end_if_a_task_dies(job, plan, status, tasks, names, ending, poll_sec: float = 1.0) -> None:
    """On the coordinator's host: a PS or worker task that dies ends the job at once (the
    coordinator would otherwise wait for a lost worker to come back, or fail later with a
    consequence), naming the task first, also to the hosts that follow this one."""
    while not ending.wait(poll_sec):
        for task, name in zip(tasks, names):
            if task.poll() is not None and not ending.is_set():
                reason = supervise.blame_first(job.output_dir, name, supervise.how_it_ended(task.returncode))
                sys.stdout.flush()
                status.finish(peers.FAILED, reason, followers=tuple(h for h in plan.hosts if h != job.current_host),
                              wait_sec=5.0)
                os._exit(EXIT_JOB_ERROR)

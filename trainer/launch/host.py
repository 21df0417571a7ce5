"""Carry out the plan on this host: run the training process here, or start the ranks.

No decisions here: the plan says what to start (trainer.planner.planner).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from trainer import worker
from trainer.script import process as script_process
from trainer.errors import JobError, PeerLost, Stopped
from trainer.launch import data_group, parameter_server
from trainer.script import launch as script_launch
from trainer.script import stall
from trainer.supervision import peers, supervise
from trainer.planner.planner import make_plan, refuse_an_unusable_interface
from trainer.plan.types import LaunchKind
from trainer.report import EXIT_STOPPED, AlreadyReported, read_metrics

log = logging.getLogger("trainer")


def run(job) -> dict | None:
    """Run this host's part of the job; returns the metrics when they are this process's.

    On a multi-host job this host's status port answers from the start (the others wait for
    it), this host waits for the hosts the plan names, and at the end it publishes how its
    part ended, which the other hosts read (trainer.supervision.peers); the port answers until
    the process ends (end_with_the_job).
    """
    plan = make_plan(job)
    refuse_an_unusable_interface(plan)
    log.info("%s", job.tf_line.describe())
    log.info("entry point: %s", plan.entry)
    if plan.data_service:
        log.info("instance groups: %s; data hosts %s", plan.data_service.why, ", ".join(plan.data_service.hosts))
    if plan.data_service and job.current_host in plan.data_service.hosts:
        # Its own CPUs and GPUs are not the training hosts': their plan is theirs to log.
        log.info("distribution: this host feeds the training hosts (%s), which plan their training", ", ".join(plan.hosts))
    else:
        log.info("distribution: %s", describe(plan, job.runs_script))
        if plan.start is not None and job.current_host == plan.chief.host:  # the chief starts it; the others follow
            log.info("start: %s", plan.start.describe())
    if plan.network_interface_why and len(plan.job_hosts) > 1:  # one host's processes talk over no interface
        log.warning("network: %s", plan.network_interface_why)
    if len(plan.job_hosts) == 1:
        log_input(job, plan)
        predict_scaling_if_asked(job, plan)
        return launch_host(job, plan, None)
    status = peers.StatusServer(job.current_host, peers.STATUS_PORT, plan.job_hosts)
    watch = None
    try:
        log_input(job, plan)  # a channel it cannot read ends it now, and the others hear why
        predict_scaling_if_asked(job, plan)  # with this host's status port up: the others see it is alive
        peers.wait_for(list(plan.peer_waits), job.hyperparameters.peer_wait_sec, me=job.current_host)
        if plan.data_service and job.current_host in plan.hosts:  # a training host watches the data hosts
            watch = data_group.DataHostsWatch(job, plan, status)
        metrics = launch_host(job, plan, status)
    except BaseException as err:
        # Every other host may be waiting for something of this one's (its sshd, its tasks,
        # its end): the reason stays up until they have read it (tell_the_others_how_it_ended).
        status.finish(*final_state(err, job.output_dir))
        raise
    finally:
        if watch is not None:
            watch.stop()
    status.finish(peers.DONE)  # read by every other host before this one exits (end_with_the_job)
    return metrics


def log_input(job, plan) -> None:
    """What this host's first training process reads, before anything trains: the format and
    why, and for CSV, TSV and Parquet each column and what it becomes (a channel it cannot
    read fails here, naming it)."""
    from trainer.data.pipeline import InputSpec

    process = next((p for p in plan.on_host(job.current_host) if p.rank is not None and p.channels), None)
    if job.runs_script or process is None:
        return
    spec = InputSpec.for_process(job, process, on_data_hosts=plan.data_service is not None)
    feature_size = job.hyperparameters.feature_size
    log.info("input: channel(s) '%s', %s mode, %s (by %s)%s", spec.name, spec.channels[0].input_mode, spec.data_format,
             spec.format_why, f"; {spec.describe_columns(feature_size)}" if spec.columns else "")
    for row in spec.describe(feature_size).get("columns", ()):
        log.info("input: column %s (%d) -> %s", row["column"], row["position"], row["as"])


def predict_scaling_if_asked(job, plan) -> None:
    """probe_scaling: the first training host logs whether the job's hosts pay (for one
    host: whether two would), before training, on this host's CPUs while nothing else runs."""
    if job.hyperparameters.probe_scaling and job.current_host == plan.hosts[0]:
        from trainer.measure import probe

        probe.log_prediction(job, plan)


def tell_the_others_how_it_ended(job) -> None:
    """After this host's part has failed and its failure file is written: on several hosts,
    keep its reason up until every other host has read it or no longer needs it, for at most
    FINAL_STATE_WAIT_SEC (trainer.supervision.peers.StatusServer.wait_until_read). Whatever they
    wait for of this host (its sshd, its tasks, its end) they then end at once, naming it."""
    status = peers.serving()
    if status is not None:
        status.wait_until_read(status.other_hosts)


def end_with_the_job(job) -> None:
    """After this host's part has succeeded and its outputs are written: on several hosts,
    wait (bounded by peer_wait_sec) until every other host's part has ended too, so that the
    job's hosts end together (trainer.supervision.peers.wait_for_the_job_end). Then, for at most
    30 s, until every other host has read that this one is done: a host that exited the
    moment it could would look, to one still waiting, like a host that vanished."""
    status = peers.serving()
    if status is not None:  # several hosts
        peers.wait_for_the_others_to_end(status, job.hyperparameters.peer_wait_sec)
        status.wait_until_read(status.other_hosts)


def describe(plan, runs_script: bool) -> str:
    """The plan in one line of the log. A script chooses its own batch size and learning
    rate: it is told its process's share (the scale of trainer.kit.learning_rate, its shard)."""
    processes = f"{plan.processes_per_host} {'script' if runs_script else 'training'} process(es) per host"
    if runs_script:
        what = (f"the script sets its own batch size and learning rate (scale them by "
                f"TRAINER_LEARNING_RATE_SCALE={plan.learning_rate_scale:g}, or kit.learning_rate)")
    else:
        what = (f"global batch {plan.global_batch_size}, learning rate {plan.learning_rate:g} "
                f"(x{plan.learning_rate_scale:g})")
    binding = f"; ranks {plan.launch.cpu_binding}" if plan.launch.cpu_binding else ""
    keras = (f"; the script's tf.keras is tf-keras (Keras 2: {plan.script_keras_2_why}; "
             "`import keras` stays Keras 3; TF_USE_LEGACY_KERAS=0 keeps tf.keras Keras 3)"
             if plan.script_environment else "")
    return (f"{plan.mode} ({plan.reason}); {processes}, world size {plan.world_size}, {what}; "
            f"{plan.sharding}{binding}{keras}")


@dataclass
class HostLaunch:
    """What a launcher is given: the job and plan, this host's status port (None on one
    host), and for a user's script, what its launch needs from the toolkit."""

    job: object
    plan: object
    status: object
    toolkit_env: object = None  # the toolkit's Environment, read once per host
    explain: object = None  # writes a script rank's failure file from mpirun's output
    watch: object = None  # a script's stall watch (trainer.script.stall), for its mpirun
    cwd: str | None = None  # where the script's processes start


def launch_host(job, plan, status) -> dict | None:
    """Start this host's processes the way the plan's launch kind says; the metrics when
    they are this host's."""
    launch = HostLaunch(job, plan, status)
    if job.runs_script:
        launch.toolkit_env = script_process.toolkit_environment(job)
        script_launch.prepare(job, launch.toolkit_env)
        # A script writes no failure file of its own: its rank's output says why it failed.
        launch.explain, launch.cwd = script_launch.mpirun_failure_writer(job, plan), job.entry_point.code_dir
        launch.watch = stall.StallWatch(job, plan)
    return LAUNCHERS[plan.launch.kind](launch)


def run_in_process(launch: HostLaunch) -> dict:
    return worker.run_process(launch.job, launch.plan, launch.plan.on_host(launch.job.current_host)[0])


def run_script(launch: HostLaunch) -> None:
    script_launch.run(launch.job, launch.plan, launch.toolkit_env)


def run_mpirun(launch: HostLaunch) -> dict | None:
    job, plan = launch.job, launch.plan
    supervise.supervise_mpirun(job, plan, plan.launch.command, cwd=launch.cwd, explain=launch.explain, watch=launch.watch)
    return read_metrics(job.output_data_dir)


def run_toolkit_mpi(launch: HostLaunch) -> dict | None:
    from trainer.launch import toolkit_mpi  # the SageMaker training toolkit's MPI setup: in the image

    toolkit_mpi.run(launch.job, launch.plan, launch.status, launch.explain, launch.cwd, launch.watch)
    return read_metrics(launch.job.output_data_dir)


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


LAUNCHERS = {
    LaunchKind.IN_PROCESS: run_in_process,
    LaunchKind.SCRIPT: run_script,
    LaunchKind.MPIRUN: run_mpirun,
    LaunchKind.SAGEMAKER_MPI: run_toolkit_mpi,
    LaunchKind.PARAMETER_SERVER: parameter_server.run,
    LaunchKind.DATA_SERVICE: data_group.run,
}

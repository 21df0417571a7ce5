"""The planner: a pure function from the job to a plan. Every distribution decision is here,
in what it reads (trainer.plan: which mode, auto) or in the mode it chooses (trainer.modes).

A plan says which mode runs (and why), how many processes each host starts, and for every
process its host, rank, role, training channels, shard `(n, i)`, evaluation shard,
TF_CONFIG and the command that launches the host's processes; plus batch and learning
rate scaling. `trainer plan` prints it as JSON before anything runs. Launchers and
workers only carry it out.
"""
from __future__ import annotations

import dataclasses
import os

from trainer import modes
from trainer.contract.channels import eval_channel_name, training_channels
from trainer.contract.checkpoint_folder import checkpoints_in
from trainer.contract.model_channel import find_model
from trainer.contract.network import choose_interface
from trainer.errors import JobError
from trainer.modes.base import Mode, modes_that
from trainer.plan import auto, start
from trainer.plan.layout import Layout, check_channels
from trainer.plan.types import MPI_KINDS, LaunchKind, Plan, SshTrust
from trainer.planner import data_groups

STEPS_PER_EXECUTION = 32


def choose_mode(job) -> tuple[Mode, str]:
    """(mode, why) among the registered modes (trainer.plan.auto)."""
    _refuse_a_script_for_another_line(job)
    return auto.choose(job, modes.all_modes())


def _refuse_a_script_for_another_line(job) -> None:
    """A Keras 3 script on the line whose Keras is 2, or a script of Horovod's standalone-Keras
    API on a line whose `import keras` is Keras 3, fails before it starts, naming the line and
    what to use."""
    entry = job.entry_point
    if job.runs_script and entry.keras_3 and not job.tf_line.keras_3:
        raise JobError(f"entry point {entry.program}: {entry.keras_3} is Keras 3's, written for TensorFlow 2.16 or "
                       f"later; this image's TensorFlow {job.tf_line.name} line runs {job.tf_line.keras}: use the "
                       "2.21 image (tag 2.21-cpu)")
    if job.runs_script and entry.horovod_keras.endswith(": horovod.keras") and job.tf_line.keras_3:
        raise JobError(f"entry point {entry.program}: {entry.horovod_keras} is Horovod's API for the standalone "
                       f"Keras 2 package, and `import keras` on this image's TensorFlow {job.tf_line.name} line is "
                       "Keras 3, which Horovod does not support: use horovod.tensorflow.keras with tf.keras (this "
                       "container gives the script tf.keras as Keras 2, tf-keras), horovod.tensorflow's "
                       "DistributedGradientTape in a custom loop, or the 2.14 image (tag 2.14-cpu)")


def steps_per_execution(hp, mode: Mode) -> int:
    """Keras' steps_per_execution: Python's and the dispatch's cost per step paid once per
    call. Only where a pass may end inside a call: one process, Horovod (whose ranks pad
    their data and agree when an epoch ends, equal_steps), parameter servers (a call runs
    on one worker until its pass ends). Replicas of a strategy would reach the end of their
    data at different steps inside the call and mismatch their collectives; a profiler
    window counts calls."""
    if not mode.multi_step_calls:
        if (hp.steps_per_execution or 1) > 1:
            raise JobError(f"hyperparameter 'steps_per_execution': distribution {mode.name} runs one step per "
                           "call (its replicas could reach the end of their data at different steps inside a "
                           f"call); set it to 1, or use {modes_that(lambda m: m.multi_step_calls)}")
        return 1
    if hp.steps_per_execution is not None:
        usual = hp.steps_per_execution
    elif hp.profile_steps is not None:
        usual = 1
    else:
        usual = min(STEPS_PER_EXECUTION, hp.log_steps)
    return mode.steps_per_call(hp, usual)


def _layout(job, mode: Mode) -> Layout:
    """The training channels (a script's only if named as ours: its rank's own channel and
    shard are then worked out as for the built-in model), checked for the mode."""
    if job.runs_script:
        try:
            channels = training_channels(job)
        except JobError:
            channels = []
    else:
        channels = training_channels(job)
        mode.check(job, channels)
    per_host = mode.processes_per_host(job)
    if channels:
        check_channels(channels, per_host)
    eval_name = eval_channel_name(job)
    return Layout(job, tuple(channels), per_host, job.channels[eval_name] if eval_name else None)


def _entry(job) -> str:
    if job.entry_point is None:
        return "built-in DeepFM" + (f" with hooks from {job.hyperparameters.user_module}"
                                    if job.hyperparameters.user_module.strip() else "")
    return f"{job.entry_point.kind} {job.entry_point.program}: {job.entry_point.why}"


def _input_mode(job, channels) -> str:
    first = channels[0] if channels else next(iter(job.channels.values()), None)
    return first.input_mode if first else "File"


def make_plan(job) -> Plan:
    """The plan of `job`; on a heterogeneous cluster whose groups that do not train feed the
    others, the training groups' plan with the data service beside it (trainer.planner.data_groups)."""
    training_hosts, service = data_groups.training_hosts_and_service(job)
    if service is None:
        return training_plan(dataclasses.replace(job, hosts=training_hosts) if job.instance_groups else job)
    return data_groups.fed_plan(job, training_hosts, service, training_plan)


def training_plan(job) -> Plan:
    """The plan of `job`'s training hosts (all of its hosts, where no data group feeds them)."""
    hp = job.hyperparameters
    mode, reason = choose_mode(job)
    layout = _layout(job, mode)
    replicas = mode.replicas(job)
    world = len(job.hosts) * layout.per_host
    scale = float(world * replicas if mode.synchronous else 1) if hp.scale_learning_rate else 1.0
    launch = mode.launch(job, layout.per_host)
    leader = job.hosts[0] if len(job.hosts) > 1 and mode.has_leader else None
    interface = choose_interface(job.network_interface, job.interfaces, job.own_address, job.current_host)
    keras_2_why = _why_a_script_needs_keras_2(job, mode) if job.runs_script else ""
    script_environment = (job.tf_line.script_environment(not keras_2_why, job.entry_point.keras_3, os.environ)
                          if job.runs_script else ())
    return Plan(
        mode=mode.name, reason=reason, entry=_entry(job), hosts=job.hosts, current_host=job.current_host,
        input_mode=_input_mode(job, layout.channels), processes_per_host=layout.per_host, world_size=world,
        replicas_per_process=replicas, batch_size=hp.batch_size,
        steps_per_execution=1 if job.runs_script else steps_per_execution(hp, mode),
        global_batch_size=hp.batch_size * world * replicas,
        learning_rate=hp.learning_rate * scale, learning_rate_scale=scale,
        warmup_steps=hp.warmup_steps if scale > 1 else 0,
        sharding=layout.sharding, processes=tuple(mode.processes(layout)), launch=launch,
        peer_waits=mode.peer_waits(job),
        leader=leader,
        watch_peers=job.runs_script and len(job.hosts) > 1 and launch.kind not in MPI_KINDS,
        ssh_trust=SshTrust.from_leader(leader, job.hosts) if launch.kind == LaunchKind.SAGEMAKER_MPI else None,
        script_environment=script_environment, script_keras_2_why=keras_2_why if script_environment else "",
        network_interface=interface.name, network_interface_why=interface.why,
        network_interface_usable=interface.usable, start=None if job.runs_script else training_start(job))


def training_start(job) -> start.Start:
    """What the built-in model or hooks' start from (a script resumes as it chooses)."""
    hp = job.hyperparameters
    channel = job.channels.get(hp.model_channel)
    model = None
    if channel is not None:
        found = find_model(channel)
        record = found.record or {}
        model = start.Source("model", found.describe(), resume=False, job=record.get("job"),
                             epoch=record.get("epoch"), step=record.get("step"))
    return start.choose_start(checkpoints_in(job.checkpoint_dir), job.job_name, hp.init_from, model, job.checkpoint_dir,
                        hp.model_channel)


def _why_a_script_needs_keras_2(job, mode: Mode) -> str:
    """Why a script's tf.keras must be Keras 2 on a Keras 3 line, or "" (it gets Keras 3)."""
    if not job.tf_line.keras_3:
        return ""
    if job.entry_point.horovod_keras:  # its DistributedOptimizer wraps Keras 2's optimizer methods
        return f"{job.entry_point.horovod_keras.split(': ')[1]} (its {job.entry_point.horovod_keras.split(':')[0]}) " \
               "wraps Keras 2's optimizers"
    if not mode.keras_3_trains:
        return f"Keras 3's fit cannot train under {mode.name}"
    return ""


def refuse_an_unusable_interface(plan: Plan) -> None:
    """On the job's own host, before anything starts: MPI across hosts over an interface this
    host does not have ends the job, naming it and what the host has. (`trainer plan` run
    elsewhere only says so: the interfaces it sees are its own machine's.)"""
    if not plan.network_interface_usable and plan.launch.kind in MPI_KINDS and len(plan.hosts) > 1:
        raise JobError(f"{plan.network_interface_why}; {plan.mode} runs MPI between the job's hosts over it")

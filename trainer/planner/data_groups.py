"""Heterogeneous clusters: which instance groups train, and which feed them.

SageMaker can run one job on groups of different instance types; the usual reason is to move
the CPU-heavy input work (reading, parsing, augmenting) off the expensive training instances.
Here the groups that train run the job's distribution mode among themselves only (its
TF_CONFIG and MPI cover them, as AWS's toolkit does with the SDK's distribution
`instance_groups`); the hosts of the other groups run a tf.data service (a dispatcher on the
first, a worker on each) that the training processes read their batches from.
"""
from __future__ import annotations

import dataclasses
import re

from trainer import modes
from trainer.errors import JobError
from trainer.modes.base import modes_that
from trainer.plan.types import (DATA_WORKER_PORT, DISPATCHER_PORT, SCRIPT_RANK_COMMAND, STATUS_PORT, DataService,
                                Launch, LaunchKind, PeerWait, Plan, Process)

# The SDK's distribution `instance_groups`, as the framework hyperparameter it becomes.
SDK_DISTRIBUTION_GROUPS = "sagemaker_distribution_instance_groups"
GPU_INSTANCE_TYPE = re.compile(r"^ml\.(p\d|g\d)")  # ml.p3, ml.p4d, ml.g4dn, ml.g5 ...

BUILT_IN_READING = (
    "each training process is its own consumer of its own shard (the shard it reads without a data group), "
    "and the data workers split that shard block by block (tf.data service's static sharding by hint: each "
    "parses every N-th block of records), so every example is seen once an epoch and each process gets "
    "its own examples in as many batches of the same size; not parallel_epochs (every worker would produce the whole shard: each example N "
    "times an epoch) nor distributed_epoch (it splits by file: a channel of one file would feed one worker); "
    "evaluation is read by the training processes themselves, as without a data group")
SCRIPT_ON_DATA_HOSTS = (
    "the script runs on the data hosts too (data_hosts_run=script), as in AWS's container: it starts there what "
    "the training reads (SM_CURRENT_INSTANCE_GROUP says which group a host is in)")
SCRIPT_READING = (
    "the script reads through the dispatcher in TRAINER_DATA_SERVICE (trainer.kit.from_data_service: "
    "distributed_epoch, each element of its dataset once an epoch, split among the workers as they ask)")


def has_gpus(instance_type: str) -> bool:
    return bool(GPU_INSTANCE_TYPE.match(instance_type))


def _names(value) -> list[str]:
    """A list of group names from a hyperparameter or the SDK's key (a list or "a,b")."""
    if isinstance(value, (list, tuple)):
        return [str(v).strip() for v in value if str(v).strip()]
    return [v.strip() for v in str(value).split(",") if v.strip()]


def _training_groups(job) -> tuple[list[str], str]:
    """(the names of the groups that train, why)."""
    groups = {g.name: g for g in job.instance_groups}
    listed = ", ".join(f"{g.name} ({g.instance_type}, {len(g.hosts)} host(s))" for g in job.instance_groups)
    setting = job.hyperparameters.training_groups
    if setting.strip().lower() not in ("", "auto"):
        names, why, where = _names(setting), "hyperparameter training_groups", "hyperparameter 'training_groups'"
    elif job.framework_params.get(SDK_DISTRIBUTION_GROUPS):
        names = _names(job.framework_params[SDK_DISTRIBUTION_GROUPS])
        why, where = "the SDK's distribution instance_groups", f"{SDK_DISTRIBUTION_GROUPS} (the SDK's distribution instance_groups)"
    else:
        names = [g.name for g in job.instance_groups if has_gpus(g.instance_type)]
        if not names or len(names) == len(groups):
            raise JobError(f"instance groups {listed}: which of them train is not said; set the hyperparameter "
                           "training_groups (e.g. training_groups=" + job.instance_groups[-1].name + ") or the "
                           "SDK's distribution instance_groups; the other groups then feed them through tf.data service")
        why = "the groups of GPU instance types"
    unknown = [n for n in names if n not in groups]
    if unknown:
        raise JobError(f"{where}: no instance group named {', '.join(unknown)}; the job's groups: {listed}")
    if not any(groups[n].hosts for n in names):
        raise JobError(f"{where}: the training groups {', '.join(names)} have no hosts: no group to train on; "
                       f"the job's groups: {listed}")
    return names, why


def training_hosts_and_service(job) -> tuple[tuple[str, ...], DataService | None]:
    """(the training hosts, the data service of the other groups' hosts; None when every host trains)."""
    if not job.instance_groups:
        return job.hosts, None
    names, why = _training_groups(job)
    training = tuple(h for g in job.instance_groups if g.name in names for h in g.hosts)
    feeding = [g for g in job.instance_groups if g.name not in names and g.hosts]
    if not feeding:
        return training, None
    for group in feeding:
        if has_gpus(group.instance_type):
            raise JobError(f"instance group {group.name} ({group.instance_type}) has GPUs but does not train "
                           f"({why}: {', '.join(names)}); its hosts would only run tf.data service workers on their "
                           "CPUs: add it to training_groups, or give it a CPU instance type")
    data_hosts = tuple(h for g in feeding for h in g.hosts)
    serves = not (job.runs_script and job.hyperparameters.data_hosts_run == "script")
    reading = (BUILT_IN_READING if not job.runs_script else SCRIPT_READING if serves else SCRIPT_ON_DATA_HOSTS)
    how = "through tf.data service" if serves else "with the script"
    return training, DataService(tuple(names), tuple(g.name for g in feeding), data_hosts,
                                 f"training: {', '.join(names)} ({why}); feeding them {how}: "
                                 f"{', '.join(g.name for g in feeding)}", reading, serves)


def fed_plan(job, training_hosts: tuple[str, ...], service: DataService, training_plan) -> Plan:
    """The plan of `job` whose `training_hosts` a data group feeds (`service`): the training
    group's plan (`training_plan` of the job as its hosts see it), the data group's processes
    beside it; on a data host, what that host runs."""
    on_data_host = job.current_host not in training_hosts
    view = dataclasses.replace(job, hosts=training_hosts,
                               current_host=training_hosts[0] if on_data_host else job.current_host)
    plan = _training_group_plan(job, view, service, training_plan)
    _check_data_service(job, plan)
    data_roles = {True: ("data_worker",), False: ("data",)}[service.serves]
    data_processes = tuple(Process(host=host, role=role, rank=None, local_rank=0, channels=(), shard=(1, 0),
                                   eval_shard=None, gpu=None)
                           for host in service.hosts
                           for role in (("dispatcher",) if service.serves and host == service.dispatcher else ())
                           + data_roles)
    plan = dataclasses.replace(plan, data_service=service, processes=plan.processes + data_processes)
    if on_data_host:
        # A data host serves (or runs the script) until the training ends: it follows the first training host.
        launch = Launch(LaunchKind.DATA_SERVICE) if service.serves else Launch(LaunchKind.SCRIPT, SCRIPT_RANK_COMMAND)
        return dataclasses.replace(plan, current_host=job.current_host, launch=launch,
                                   peer_waits=(PeerWait(training_hosts[0], STATUS_PORT, "train"),),
                                   leader=training_hosts[0], watch_peers=False, ssh_trust=None)
    service_ports = ((DISPATCHER_PORT, "tf.data dispatcher"), (DATA_WORKER_PORT, "tf.data worker"))
    waits = tuple(PeerWait(host, port, what) for host in service.hosts
                  for port, what in ((STATUS_PORT, "train"),) + (service_ports if service.serves else ())
                  if what != "tf.data dispatcher" or host == service.dispatcher)
    return dataclasses.replace(plan, peer_waits=plan.peer_waits + waits)


def _training_group_plan(job, view, service, training_plan) -> Plan:
    """The training group's plan (`view`: the job as its hosts see it) where a data group feeds
    it. The container's own parameter servers read their input on each worker's own host,
    which a data group cannot feed: asked for, they are refused (auto picks other modes)."""
    plan = training_plan(view)
    if not modes.get(plan.mode).reads_from_a_data_group and not job.runs_script:
        raise JobError(f"instance groups: {service.why}: {plan.mode} reads its input on each worker's own host, "
                       f"not through a data group; use "
                       f"{modes_that(lambda mode: mode.reads_from_a_data_group and not mode.in_process)} "
                       "on the training group, or no data group")
    return plan


def _check_data_service(job, plan) -> None:
    """What a data group cannot feed besides parameter servers (_training_group_plan)."""
    if plan.input_mode == "Pipe" and not job.runs_script:
        raise JobError("instance groups: a data group reads the training channels' files on its own hosts; a "
                       "Pipe-mode channel streams to one reader on the host it is sent to: use File (or FastFile) "
                       "mode for a job with a data group")

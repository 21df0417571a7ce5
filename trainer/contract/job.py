"""One typed, validated view of SageMaker's training contract.

Reading is done by `sagemaker_training.environment` (the SageMaker training toolkit);
this module adds what it lacks: clear errors for missing or malformed config files,
typed hyperparameters, channel modes and S3 distribution, Pipe-mode FIFO paths, the
checkpoint dir, `SM_*` overrides and the CPU topology. It never imports TensorFlow, so
CPU settings can be applied from the job before TensorFlow starts.
"""
from __future__ import annotations

import importlib
import json
import os
from dataclasses import dataclass, field
from typing import Any

from trainer.contract import model_trainer
from trainer.contract.hyperparameters import SPEC_BY_NAME, Hyperparameters, parse_hyperparameters
from trainer.contract.network import present_interfaces
from trainer.cpu.settings import physical_cores
from trainer.errors import JobError
from trainer.contract.user_code import EntryPoint, locate
from trainer.tf_line import Line, installed

DEFAULT_BASE_DIR = "/opt/ml"
BASE_DIR_ENV = "SAGEMAKER_BASE_DIR"
# Set where the job's hosts are simulated on one machine (`trainer local --hosts N`): they
# share its filesystem, so what a host keeps of its own (ssh keys) must not be at a fixed path.
SHARED_MACHINE_ENV = "TRAINER_HOSTS_SHARE_THIS_MACHINE"
JOB_NAME_ENV = "TRAINING_JOB_NAME"  # set by SageMaker (and its SDKs' local mode) in every job's container
CONFIG_FILES = ("resourceconfig.json", "inputdataconfig.json", "hyperparameters.json")
INPUT_MODES = ("File", "Pipe", "FastFile")
S3_DISTRIBUTIONS = ("FullyReplicated", "ShardedByS3Key")
COMPRESSION_TYPES = ("None", "Gzip")
RECORD_WRAPPER_TYPES = ("None", "RecordIO")


@dataclass(frozen=True)
class Channel:
    name: str
    input_mode: str  # File | Pipe | FastFile
    s3_distribution: str  # FullyReplicated | ShardedByS3Key
    content_type: str
    path: str  # File/FastFile: the channel's folder; Pipe: the FIFO prefix (<path>_<epoch>)
    compression: str = "None"  # CompressionType: None | Gzip
    record_wrapper: str = "None"  # RecordWrapperType: None | RecordIO (each S3 object in one RecordIO record)

    @property
    def is_pipe(self) -> bool:
        return self.input_mode == "Pipe"

    @property
    def is_gzip(self) -> bool:
        """Files to decompress while reading: File mode only (in Pipe mode SageMaker streams
        a Gzip channel's records decompressed)."""
        return self.compression == "Gzip" and not self.is_pipe

    @property
    def is_recordio_wrapped(self) -> bool:
        """Pipe mode streams each object wrapped in a RecordIO record (File mode gets the
        objects as they are)."""
        return self.record_wrapper == "RecordIO" and self.is_pipe

    def fifo_path(self, epoch: int) -> str:
        return f"{self.path}_{epoch}"


@dataclass(frozen=True)
class InstanceGroup:
    """One instance group of a heterogeneous cluster, as resourceconfig.json lists it."""

    name: str
    instance_type: str
    hosts: tuple[str, ...]


@dataclass(frozen=True)
class Job:
    base_dir: str
    hosts: tuple[str, ...]
    current_host: str
    instance_type: str
    network_interface: str  # as resourceconfig.json names it (trainer.contract.network)
    num_cpus: int  # vCPUs this container may use
    num_physical_cores: int
    num_gpus: int
    channels: dict[str, Channel]
    hyperparameters: Hyperparameters
    framework_params: dict[str, Any]  # the sagemaker_* hyperparameters, JSON-decoded
    model_dir: str
    output_dir: str
    output_data_dir: str
    checkpoint_dir: str
    # sagemaker_program in sagemaker_submit_directory: a hooks module or a training script
    entry_point: EntryPoint | None = None
    # Where TensorBoard's event files go, uploaded live by SageMaker when the job asks for it
    # ("" outside a job read from its folder: nothing is written).
    tensorboard_dir: str = ""
    # A heterogeneous cluster's instance groups (none: one instance type, SageMaker's
    # "homogeneousCluster"), and the group this host is in.
    instance_groups: tuple[InstanceGroup, ...] = ()
    current_group: str = ""
    # The image's TensorFlow line (trainer.tf_line): what the planner may use (Horovod or not).
    tf_line: Line = field(default_factory=installed)
    # This host's interfaces and their addresses (empty: not looked at), and the address its
    # job name resolves to where that decides the interface (trainer.contract.network).
    interfaces: dict[str, tuple[str, ...]] = field(default_factory=dict)
    own_address: str | None = None
    # SageMaker's name of the job (TRAINING_JOB_NAME), which a restarted job keeps: it tells a
    # restart's own checkpoints from another job's (trainer.plan.start). None: not given.
    job_name: str | None = None

    @property
    def host_index(self) -> int:
        return self.hosts.index(self.current_host)

    @property
    def runs_script(self) -> bool:
        """The user's own training script trains (not the built-in model or hooks)."""
        return bool(self.entry_point and self.entry_point.is_script)

    @property
    def trains_builtin_model(self) -> bool:
        """The built-in DeepFM trains: no script, no hooks module by name, no model_fn hook."""
        entry = self.entry_point
        return (not self.runs_script and not self.hyperparameters.user_module
                and not (entry and "model_fn" in entry.hooks))


def base_dir_from_env() -> str:
    return os.environ.get(BASE_DIR_ENV, DEFAULT_BASE_DIR)


def output_dir_of(base_dir: str) -> str:
    """Where the failure file goes, known even when the rest of the job cannot be read."""
    return os.environ.get("SM_OUTPUT_DIR", os.path.join(base_dir, "output"))


TENSORBOARD_CONFIG = "tensorboardoutputconfig.json"
CHECKPOINT_CONFIG = "checkpointconfig.json"


def tensorboard_dir_of(input_config_dir: str, output_dir: str) -> str:
    """Where SageMaker uploads TensorBoard's files from while the job runs: the LocalPath of
    the job's TensorBoardOutputConfig (SageMaker writes it to tensorboardoutputconfig.json
    beside the other config files), else the SDK's default, <output>/tensorboard."""
    return _local_path_of(os.path.join(input_config_dir, TENSORBOARD_CONFIG), os.path.join(output_dir, "tensorboard"))


def checkpoint_dir_of(input_config_dir: str, base_dir: str) -> str:
    """Where checkpoints are written and resumed from: the LocalPath of the job's
    CheckpointConfig (the SDK's checkpoint_local_path; SageMaker writes checkpointconfig.json
    and syncs that folder with checkpoint_s3_uri), else SageMaker's default, /opt/ml/checkpoints."""
    return _local_path_of(os.path.join(input_config_dir, CHECKPOINT_CONFIG), os.path.join(base_dir, "checkpoints"))


def _local_path_of(path: str, default: str) -> str:
    """The LocalPath of one of SageMaker's output config files, else `default`."""
    if os.path.isfile(path):
        try:
            with open(path) as f:
                local_path = json.load(f).get("LocalPath")
        except (OSError, ValueError, AttributeError) as err:
            raise JobError(f"config file {path} is not a JSON object with LocalPath: {err}") from None
        if local_path:
            if not isinstance(local_path, str) or not os.path.isabs(local_path):
                raise JobError(f"config file {path}: LocalPath must be an absolute path, got {local_path!r}")
            return local_path
    return default


def toolkit_environment_module(base_dir: str):
    """The toolkit's `environment` module, bound to `base_dir`.

    It reads SAGEMAKER_BASE_DIR once, at import; a process that reads a second job folder
    (tests, `trainer plan` over several folders) reloads it for the new one.
    """
    os.environ[BASE_DIR_ENV] = base_dir
    from sagemaker_training import environment

    if environment.base_dir != base_dir:
        environment = importlib.reload(environment)
    return environment


def _read_config(environment, name: str, reader) -> dict:
    path = os.path.join(environment.input_config_dir, name)
    if not os.path.isfile(path):
        raise JobError(f"config file missing: {path} (SageMaker writes it; trainer local lays it out)")
    try:
        with open(path, encoding="utf-8") as file:
            value = json.load(file)
    except json.JSONDecodeError as err:
        raise JobError(f"config file {path} is not valid JSON: line {err.lineno} column {err.colno}: {err.msg}") from None
    except UnicodeDecodeError as err:
        raise JobError(f"config file {path} is not UTF-8 text (byte {err.start}): SageMaker writes JSON") from None
    # Checked before the toolkit reads it: its readers take an object for granted.
    if not isinstance(value, dict):
        raise JobError(f"config file {path} must hold a JSON object, got {type(value).__name__}")
    return reader()


def _channels(environment, input_data_config: dict, config_path: str) -> dict[str, Channel]:
    channels = {}
    for name, config in input_data_config.items():
        if not isinstance(config, dict):
            raise JobError(f"{config_path}: channel '{name}' must be a JSON object")
        mode = config.get("TrainingInputMode", "File")
        if mode not in INPUT_MODES:
            raise JobError(f"{config_path}: channel '{name}': TrainingInputMode {mode!r}; accepted: {', '.join(INPUT_MODES)}")
        distribution = config.get("S3DistributionType", "FullyReplicated")
        if distribution not in S3_DISTRIBUTIONS:
            raise JobError(
                f"{config_path}: channel '{name}': S3DistributionType {distribution!r}; accepted: {', '.join(S3_DISTRIBUTIONS)}"
            )
        compression, wrapper = (_one_of(config, key, accepted, config_path, name) for key, accepted in (
            ("CompressionType", COMPRESSION_TYPES), ("RecordWrapperType", RECORD_WRAPPER_TYPES)))
        # SM_CHANNEL_<NAME> (upper case, '-' kept, as the toolkit writes it) overrides a File path.
        path = os.environ.get(f"SM_CHANNEL_{name.upper()}") if mode != "Pipe" else None
        channels[name] = Channel(
            name=name,
            input_mode=mode,
            s3_distribution=distribution,
            content_type=str(config.get("ContentType", "") or ""),
            path=path or environment.channel_path(name),
            compression=compression,
            record_wrapper=wrapper,
        )
    return channels


def _one_of(config: dict, key: str, accepted: tuple[str, ...], config_path: str, channel: str) -> str:
    value = config.get(key) or "None"
    if value not in accepted:
        raise JobError(f"{config_path}: channel '{channel}': {key} {value!r}; accepted: {', '.join(accepted)}")
    return value


def _hosts(resource_config: dict, rc_path: str) -> tuple[tuple[str, ...], str]:
    """(hosts, current host) from resourceconfig.json, checked."""
    hosts = resource_config.get("hosts")
    current_host = resource_config.get("current_host")
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts):
        raise JobError(f"{rc_path}: 'hosts' must be a non-empty list of host names")
    repeated = sorted({host for host in hosts if hosts.count(host) > 1})
    if repeated:
        raise JobError(f"{rc_path}: 'hosts' names {', '.join(map(repr, repeated))} more than once: {hosts}")
    if current_host not in hosts:
        raise JobError(f"{rc_path}: current_host {current_host!r} is not one of hosts {hosts}")
    return tuple(hosts), current_host


def _instance_groups(resource_config: dict, hosts: tuple[str, ...], rc_path: str) -> tuple[InstanceGroup, ...]:
    """A heterogeneous cluster's groups, checked against the hosts; () for one instance type
    (resourceconfig.json then lists one group, or none)."""
    raw = resource_config.get("instance_groups") or []
    if not isinstance(raw, list) or not all(isinstance(g, dict) for g in raw):
        raise JobError(f"{rc_path}: 'instance_groups' must be a list of objects")
    if len(raw) < 2:
        return ()
    groups, seen = [], {}
    for group in raw:
        name, members = group.get("instance_group_name"), group.get("hosts")
        if not isinstance(name, str) or not name:
            raise JobError(f"{rc_path}: an instance group without instance_group_name: {group}")
        if not isinstance(members, list) or not all(isinstance(h, str) for h in members):
            raise JobError(f"{rc_path}: instance group '{name}': 'hosts' must be a list of host names")
        for host in members:
            if host not in hosts:
                raise JobError(f"{rc_path}: instance group '{name}' lists host {host!r}, which is not one of hosts {list(hosts)}")
            if host in seen:
                raise JobError(f"{rc_path}: host {host!r} is in instance groups '{seen[host]}' and '{name}'")
            seen[host] = name
        groups.append(InstanceGroup(name, str(group.get("instance_type", "")), tuple(members)))
    return tuple(groups)


def _entry_point(env, data_dir: str) -> EntryPoint | None:
    """sagemaker_program in its folder, else ModelTrainer's entry script in its code channel,
    located and classified (None: the built-in model)."""
    user_program = env.user_entry_point if env.user_entry_point not in (None, "None") else None
    code_dir = env.module_dir
    if not user_program:
        user_program, code_dir = model_trainer.entry_script(data_dir) or (None, None)
    if not user_program:
        return None
    kind = SPEC_BY_NAME["entry_point_kind"]
    return locate(user_program, code_dir, kind.parse(env.hyperparameters.get(kind.name, kind.default)))


def read_job(base_dir: str | None = None) -> Job:
    """Read and validate the job folder (default: $SAGEMAKER_BASE_DIR or /opt/ml)."""
    base_dir = os.path.abspath(base_dir or base_dir_from_env())
    if not os.path.isdir(base_dir):
        raise JobError(f"job folder {base_dir} does not exist (set {BASE_DIR_ENV} or run inside SageMaker)")
    environment = toolkit_environment_module(base_dir)
    resource_config = _read_config(environment, "resourceconfig.json", environment.read_resource_config)
    input_data_config = _read_config(environment, "inputdataconfig.json", environment.read_input_data_config)
    raw_hyperparameters = _read_config(environment, "hyperparameters.json", environment.read_hyperparameters)
    rc_path = os.path.join(environment.input_config_dir, "resourceconfig.json")
    hosts, current_host = _hosts(resource_config, rc_path)
    instance_groups = _instance_groups(resource_config, hosts, rc_path)  # checked before the toolkit reads them

    env = environment.Environment(
        resource_config=resource_config,
        input_data_config=input_data_config or None,
        hyperparameters=raw_hyperparameters,
    )
    data_dir = os.path.join(environment.input_dir, "data")
    entry_point = _entry_point(env, data_dir)
    hyperparameters = parse_hyperparameters(env.hyperparameters, has_user_code=entry_point is not None,
                                            for_script=bool(entry_point and entry_point.is_script))

    interfaces = present_interfaces()
    allowed_cpus = os.sched_getaffinity(0)
    num_cpus = int(os.environ.get("SM_NUM_CPUS", len(allowed_cpus)))
    model_dir = os.environ.get("SM_MODEL_DIR", environment.model_dir)
    output_dir = output_dir_of(base_dir)
    return Job(
        base_dir=base_dir,
        hosts=hosts,
        current_host=current_host,
        instance_type=env.current_instance_type,
        network_interface=env.network_interface_name,
        num_cpus=num_cpus,
        num_physical_cores=min(num_cpus, physical_cores(allowed_cpus)),
        num_gpus=int(os.environ.get("SM_NUM_GPUS", env.num_gpus)),
        channels=_channels(environment, input_data_config, os.path.join(environment.input_config_dir, "inputdataconfig.json")),
        hyperparameters=hyperparameters,
        # the sagemaker_* keys; ModelTrainer's distributed= where the job's own do not say
        framework_params={**model_trainer.sdk_keys(data_dir), **env.additional_framework_parameters},
        model_dir=model_dir,
        output_dir=output_dir,
        output_data_dir=os.environ.get("SM_OUTPUT_DATA_DIR", os.path.join(output_dir, "data")),
        checkpoint_dir=checkpoint_dir_of(environment.input_config_dir, base_dir),
        entry_point=entry_point,
        tensorboard_dir=tensorboard_dir_of(environment.input_config_dir, output_dir),
        instance_groups=instance_groups,
        current_group=str(resource_config.get("current_group_name", "") or ""),
        interfaces=interfaces,
        job_name=os.environ.get(JOB_NAME_ENV) or None,
        own_address=_own_address(current_host) if len(hosts) > 1 and env.network_interface_name not in interfaces
        else None,
    )


def _own_address(host: str) -> str | None:
    """The address the host's job name resolves to (bounded; None: it does not resolve)."""
    from trainer.contract.addresses import address_of  # a bounded lookup, whose answers the job keeps

    return address_of(host)

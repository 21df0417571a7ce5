"""The planner: a pure function from the job to a plan. Every distribution decision is here.

A plan says which mode runs (and why), how many processes each host starts, and for every
process its host, rank, role, training channels, shard `(n, i)`, evaluation shard,
TF_CONFIG and the command that launches the host's processes; plus batch and learning
rate scaling. `trainer plan` prints it as JSON before anything runs. Launchers and
workers only carry it out.
"""
from __future__ import annotations

import shlex
from dataclasses import asdict, dataclass, field, replace

from trainer.contract.channels import eval_channel_name, training_channels
from trainer.contract.hyperparameters import parse_bool
from trainer.contract.job import Job
from trainer.errors import JobError
from trainer.peers import STATUS_PORT, PeerWait

SINGLE, TOWER, MIRRORED = "single", "tower", "mirrored"
HOROVOD, PARAMETER_SERVER, MULTI_WORKER_MIRRORED = "horovod", "parameter_server", "multi_worker_mirrored"
IN_PROCESS_MODES = (SINGLE, TOWER, MIRRORED)
SYNCHRONOUS_MODES = (SINGLE, TOWER, MIRRORED, HOROVOD, MULTI_WORKER_MIRRORED)

# SageMaker's ports (as AWS's TensorFlow toolkit uses them): master/worker 2222, PS 2223,
# multi-worker mirrored 8890. TF 2's PS coordinator does no computation, so the first host
# also runs a worker, on its own port.
MASTER_PORT, PS_PORT, PS_WORKER_PORT, MWMS_PORT = 2222, 2223, 2224, 8890

# The SageMaker Python SDK's `distribution=` argument, as framework hyperparameters.
SDK_PS = "sagemaker_parameter_server_enabled"
SDK_MPI = "sagemaker_mpi_enabled"
SDK_MPI_PROCESSES = "sagemaker_mpi_num_of_processes_per_host"
SDK_MPI_OPTIONS = "sagemaker_mpi_custom_mpi_options"
SDK_MWMS = "sagemaker_multi_worker_mirrored_strategy_enabled"

WORKER_COMMAND = ("python", "-m", "trainer.worker")  # "python": the launcher's interpreter
# A rank of the user's training script: sets that rank's environment, then becomes the script.
SCRIPT_RANK_COMMAND = ("python", "-m", "trainer.script_process")

# The SDK's keys for what this container does not run: they end the job at once.
SDK_SMDDP = "sagemaker_distributed_dataparallel_enabled"
UNSUPPORTED = {
    SDK_SMDDP: "SageMaker's distributed data parallel library (smdistributed.dataparallel) is not in this "
               "image: use distribution={'mpi': ...} (Horovod) or multi_worker_mirrored_strategy",
    "mp_parameters": "SageMaker's model parallel library (smdistributed.modelparallel) is not in this image",
}


@dataclass(frozen=True)
class Process:
    """One process of the job."""

    host: str
    role: str  # chief (trains, or coordinates in PS mode, and writes), worker, ps
    rank: int | None  # training rank; None for processes that do not read training data
    local_rank: int
    channels: tuple[str, ...]  # training channels it reads
    shard: tuple[int, int]  # dataset.shard(n, i) applied to those channels
    eval_shard: tuple[int, int] | None  # None: takes part in evaluation with no data of its own
    gpu: int | None
    tf_config: dict | None = None

    @property
    def writes_outputs(self) -> bool:
        """Only the chief writes checkpoints and the model (see P8 in docs/pitfalls.md)."""
        return self.role == "chief"

    @property
    def name(self) -> str:
        """How logs and the failure file name it: "rank 1 on algo-2", "chief on algo-1"."""
        return f"rank {self.rank} on {self.host}" if self.rank is not None else f"{self.role} on {self.host}"


@dataclass(frozen=True)
class Launch:
    kind: str  # in_process | mpirun | sagemaker_mpi | parameter_server | script
    command: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    mode: str
    reason: str
    entry: str  # what trains: the built-in DeepFM, hooks, or the user's script (and why)
    hosts: tuple[str, ...]
    current_host: str
    input_mode: str
    processes_per_host: int  # training processes per host
    world_size: int  # training processes in the job
    replicas_per_process: int
    batch_size: int  # per replica (P7: not scaled)
    steps_per_execution: int
    global_batch_size: int
    learning_rate: float  # base rate times learning_rate_scale
    learning_rate_scale: float
    warmup_steps: int
    sharding: str  # which row of P3's table applies
    processes: tuple[Process, ...]
    launch: Launch
    # What this host waits for before its multi-host work (bounded by peer_wait_sec).
    peer_waits: tuple[PeerWait, ...] = ()
    # The host whose end is the job's end (the PS coordinator's, the MPI master's): the
    # other hosts follow its state to tell a finished leader from a lost one. None: every
    # host ends by itself (one host; multi-worker mirrored, whose workers end together).
    leader: str | None = None
    # A user's script on several hosts, but not under mpirun (which ends every rank when one
    # fails): the hosts that run their script to its end (all of them; with parameter servers
    # the master's) follow every other host, so one host failing ends their scripts.
    watch_peers: bool = False

    def process(self, rank: int) -> Process:
        return next(p for p in self.processes if p.rank == rank)

    def on_host(self, host: str) -> list[Process]:
        return [p for p in self.processes if p.host == host]

    @property
    def chief(self) -> Process:
        return next(p for p in self.processes if p.role == "chief")

    def to_dict(self) -> dict:
        return asdict(self)


def _enabled(value) -> bool:
    """An SDK key's value, read as boolean hyperparameters are; anything else is off."""
    try:
        return parse_bool(value)
    except ValueError:
        return False


def is_script(job: Job) -> bool:
    return bool(job.entry_point and job.entry_point.is_script)


def choose_mode(job: Job) -> tuple[str, str]:
    """(mode, why): the hyperparameter, else the SDK's keys as AWS's container reads them,
    else what suits the hosts, GPUs and CPUs (a training script: one process per host,
    as AWS's container runs it)."""
    hp, framework, hosts, gpus = job.hyperparameters, job.framework_params, len(job.hosts), job.num_gpus
    for key, why in UNSUPPORTED.items():
        # smdistributed.dataparallel is a framework key, true or false; model parallel's
        # `mp_parameters` is a hyperparameter the SDK sets only when it is on.
        if (_enabled(framework.get(key, False)) if key == SDK_SMDDP else key in hp.extra):
            raise JobError(f"{key}: {why}")
    if hp.distribution != "auto":
        if is_script(job) and hp.distribution in (TOWER, MIRRORED):
            raise JobError(f"hyperparameter 'distribution': {hp.distribution} builds the container's own model "
                           "in one process; a training script builds its own strategy: use single, horovod, "
                           "parameter_server or multi_worker_mirrored")
        return hp.distribution, f"distribution={hp.distribution} (hyperparameter)"
    # Same order as AWS's TensorFlow container: PS (only with several hosts), MWMS, MPI.
    if _enabled(framework.get(SDK_PS, False)) and hosts > 1:
        return PARAMETER_SERVER, f"{SDK_PS}: one parameter server and one worker per host"
    if _enabled(framework.get(SDK_MWMS, False)):
        return MULTI_WORKER_MIRRORED, f"{SDK_MWMS}: one worker per host, all-reduce across hosts"
    if _enabled(framework.get(SDK_MPI, False)):
        return HOROVOD, f"{SDK_MPI}: Horovod over MPI"
    if _enabled(framework.get(SDK_PS, False)):
        return SINGLE, f"{SDK_PS} with one host: one process (AWS's container runs no PS on one host)"
    if is_script(job):
        return SINGLE, ("a training script with no distribution: one process" +
                        (" on every host, each on its own, as in AWS's container" if hosts > 1 else ""))
    if hosts == 1 and gpus > 1:
        return HOROVOD, f"1 host with {gpus} GPUs: one Horovod process per GPU (see P9 in docs/pitfalls.md)"
    if hosts == 1:
        return SINGLE, (f"1 host with {gpus} GPU(s) and {job.num_cpus} vCPUs: one process with the "
                        "threads tuned to the host (see P10 in docs/pitfalls.md)")
    if gpus:
        return HOROVOD, f"{hosts} hosts with {gpus} GPUs each: Horovod, one process per GPU"
    return PARAMETER_SERVER, (f"{hosts} CPU hosts: parameter servers, one per host, with the embedding "
                              "partitioned over them (see P13 in docs/pitfalls.md; faster than multi-worker mirrored on CPU, P12)")


def _processes_per_host(job: Job, mode: str) -> int:
    hp = job.hyperparameters
    if mode != HOROVOD:
        if hp.processes_per_host not in (None, 1):
            raise JobError(f"hyperparameter 'processes_per_host': {hp.processes_per_host} is for horovod; "
                           f"distribution {mode} runs one training process per host")
        return 1
    count = hp.processes_per_host or int(job.framework_params.get(SDK_MPI_PROCESSES, 0) or 0) \
        or max(1, job.num_gpus)
    if job.num_gpus and count > job.num_gpus:
        raise JobError(f"{count} Horovod processes per host for {job.num_gpus} GPUs: one GPU per "
                       "process (see P9 in docs/pitfalls.md); lower processes_per_host")
    return count


def _replicas(job: Job, mode: str) -> int:
    if mode not in (TOWER, MIRRORED):
        return 1
    if job.hyperparameters.replicas:
        return job.hyperparameters.replicas
    # CPU: one replica per vCPU but one, which is kept for the reduction (P12).
    return job.num_gpus if job.num_gpus else max(2, job.num_cpus - 1)


def _sharding(job: Job, channels: list, per_host: int):
    """P3: who shards what, from the channel layout and S3 distribution."""
    distributions = {c.s3_distribution for c in channels}
    if len(distributions) > 1:
        raise JobError("training channels mix ShardedByS3Key and FullyReplicated; use one for all")
    s3_sharded = distributions == {"ShardedByS3Key"}
    multi_path = len(channels) >= per_host
    if not multi_path and channels[0].is_pipe:
        raise JobError(
            f"Pipe mode: {len(channels)} training channel(s) ({', '.join(c.name for c in channels)}) for "
            f"{per_host} training processes per host; each process needs its own channel, since a FIFO "
            f"has one reader (see P1 in docs/pitfalls.md). Pass {per_host} channels named like "
            f"{channels[0].name}-1 .. {channels[0].name}-{per_host}, or use fewer processes per host")
    hosts = len(job.hosts)

    def shard(host_index: int, local_rank: int) -> tuple[int, int]:
        if multi_path and s3_sharded:
            return (1, 0)
        if multi_path:
            return (hosts, host_index) if hosts > 1 else (1, 0)
        if s3_sharded:
            return (per_host, local_rank)
        return (hosts * per_host, host_index * per_host + local_rank)

    description = {
        (True, True): "one channel per process and ShardedByS3Key: no sharding in code",
        (True, False): "one channel per process, FullyReplicated: shard(hosts, host_index)",
        (False, True): "shared channel, ShardedByS3Key: shard(processes_per_host, local_rank)",
        (False, False): "shared channel, FullyReplicated: shard(world_size, rank)",
    }[(multi_path, s3_sharded)]
    return shard, description


def _channels_of(channels, local_rank: int, per_host: int) -> tuple[str, ...]:
    """A process's training channels: its own (every per_host-th, from its local rank) when
    there are enough for each process of the host, else all of them (shared, File mode)."""
    own = channels[local_rank::per_host] if len(channels) >= per_host else channels
    return tuple(c.name for c in own)


def _eval_shard(job: Job, mode: str, host_index: int, local_rank: int, per_host: int):
    """Evaluation data of one process: sharded when the metric is aggregated after (P4, P6)."""
    name = eval_channel_name(job)
    if name is None:
        return None
    channel = job.channels[name]
    hosts = len(job.hosts)
    if mode not in (HOROVOD, MULTI_WORKER_MIRRORED):
        return (1, 0)  # one evaluating process: the chief
    s3_sharded = channel.s3_distribution == "ShardedByS3Key"
    if channel.is_pipe:  # one FIFO reader per host: local rank 0
        if local_rank:
            return None
        return (1, 0) if s3_sharded or hosts == 1 else (hosts, host_index)
    if s3_sharded:
        return (per_host, local_rank)
    return (hosts * per_host, host_index * per_host + local_rank)


def translate_master(tf_config: dict) -> dict:
    """SageMaker's TF_CONFIG says `master`; TF 2's strategies want `chief` (see P15 in docs/pitfalls.md)."""
    cluster = {("chief" if job == "master" else job): addresses
               for job, addresses in tf_config["cluster"].items()}
    result = {**tf_config, "cluster": cluster}
    if "task" in tf_config and tf_config["task"]["type"] == "master":
        result["task"] = {**tf_config["task"], "type": "chief"}
    return result


def sagemaker_ps_cluster(hosts) -> dict:
    """The PS cluster as AWS's TensorFlow toolkit builds it for several hosts."""
    cluster = {"master": [f"{hosts[0]}:{MASTER_PORT}"], "ps": [f"{h}:{PS_PORT}" for h in hosts]}
    if len(hosts) > 1:
        cluster["worker"] = [f"{h}:{MASTER_PORT}" for h in hosts[1:]]
    return cluster


def ps_cluster(hosts) -> dict:
    """TF 2 PS cluster: SageMaker's layout with master -> chief (the coordinator), and a
    worker on every host, so each host has one PS and one worker (see P13 in docs/pitfalls.md)."""
    cluster = translate_master({"cluster": sagemaker_ps_cluster(hosts)})["cluster"]
    cluster["worker"] = [f"{h}:{PS_WORKER_PORT}" for h in hosts]
    return cluster


# TF_CONFIG for a training script, exactly as AWS's TF 2 container writes it (its toolkit,
# sagemaker-tensorflow-training 20.x: _build_tf_config_for_ps / _for_mwms), so a script
# written for that container reads what it expects. Written out here rather than imported:
# that module imports TensorFlow at its top and pins sagemaker-training <= 4.8.3 and
# numpy < 1.24, which this image's stack is past; a unit test holds the two to the same table.
def aws_ps_tf_config(hosts, current_host: str, ps_task: bool = False) -> dict:
    hosts = list(hosts)
    # On one host AWS's toolkit names no PS tasks (and runs none).
    cluster = sagemaker_ps_cluster(hosts) if len(hosts) > 1 else {"master": [f"{hosts[0]}:{MASTER_PORT}"]}
    if ps_task:
        task = {"index": hosts.index(current_host), "type": "ps"}
    elif current_host == hosts[0]:
        task = {"index": 0, "type": "master"}
    else:
        task = {"index": hosts[1:].index(current_host), "type": "worker"}
    return {"cluster": cluster, "environment": "cloud", "task": task}


def aws_mwms_tf_config(hosts, current_host: str) -> dict:
    return {"cluster": {"worker": [f"{h}:{MWMS_PORT}" for h in hosts]}, "environment": "cloud",
            "task": {"index": list(hosts).index(current_host), "type": "worker"}}


def mwms_cluster(hosts) -> dict:
    return translate_master({"cluster": {"master": [f"{hosts[0]}:{MWMS_PORT}"],
                                         **({"worker": [f"{h}:{MWMS_PORT}" for h in hosts[1:]]}
                                            if len(hosts) > 1 else {})}})["cluster"]


def _mpi_command(job: Job, per_host: int, process_command: tuple[str, ...]) -> tuple[str, ...]:
    hp = job.hyperparameters
    # One host: mpirun starts the ranks itself (no sshd); several: the toolkit's MPI runner.
    hosts = ["localhost"] if len(job.hosts) == 1 else job.hosts
    command = ["mpirun", "--allow-run-as-root", "-np", str(per_host * len(job.hosts)),
               "--host", ",".join(f"{h}:{per_host}" for h in hosts)]
    if job.num_gpus == 0 and per_host > 1:
        # P10: several CPU workers on a host: pin each to its own cores.
        cores = max(1, job.num_physical_cores // per_host)
        command += ["--map-by", f"slot:PE={cores}", "--bind-to", "core"]
    else:
        command += ["--bind-to", "none"]
    # P11: cross-memory attach is not permitted in containers.
    command += ["-mca", "btl_vader_single_copy_mechanism", "none",
                "-x", "OMPI_MCA_btl_vader_single_copy_mechanism=none"]
    for name in sorted(_horovod_env(hp)):
        command += ["-x", name]
    if is_script(job):
        command += ["--tag-output"]  # each line of a script's output with its rank in front
    command += shlex.split(mpi_options(job))
    return tuple(command) + process_command


def mpi_options(job: Job) -> str:
    """Extra mpirun options: the SDK's custom MPI options, then the hyperparameter's."""
    return f"{job.framework_params.get(SDK_MPI_OPTIONS, '') or ''} {job.hyperparameters.mpi_options}".strip()


def _horovod_env(hp) -> dict:
    """P27: Horovod's knobs, as environment variables for every rank."""
    env = {"HOROVOD_AUTOTUNE": "1" if hp.horovod_autotune else "0"}
    if hp.horovod_fusion_threshold is not None:
        env["HOROVOD_FUSION_THRESHOLD"] = str(hp.horovod_fusion_threshold)
    if hp.horovod_cycle_time is not None:
        env["HOROVOD_CYCLE_TIME"] = str(hp.horovod_cycle_time)
    return env


def _launch(job: Job, mode: str, per_host: int) -> Launch:
    process_command = SCRIPT_RANK_COMMAND if is_script(job) else WORKER_COMMAND
    if mode == HOROVOD:
        kind = "mpirun" if len(job.hosts) == 1 else "sagemaker_mpi"
        return Launch(kind, _mpi_command(job, per_host, process_command), _horovod_env(job.hyperparameters))
    if is_script(job):
        return Launch("script", process_command)
    if mode == PARAMETER_SERVER:
        return Launch("parameter_server", WORKER_COMMAND)
    return Launch("in_process")


def _peer_waits(job: Job, mode: str) -> tuple[PeerWait, ...]:
    """Before multi-host work, every host waits for every other host's `train` to answer;
    the coordinator's host also for every other host's PS and worker task, which it
    connects to first."""
    others = [h for h in job.hosts if h != job.current_host]
    waits = [PeerWait(h, STATUS_PORT, "train") for h in others]
    # A script's own TensorFlow connects to the PS tasks (and retries): only ours are awaited here.
    if mode == PARAMETER_SERVER and job.current_host == job.hosts[0] and not is_script(job):
        waits += [PeerWait(h, port, what) for h in others
                  for port, what in ((PS_PORT, "ps task"), (PS_WORKER_PORT, "worker task"))]
    return tuple(waits)


def _leader(job: Job, mode: str) -> str | None:
    return job.hosts[0] if len(job.hosts) > 1 and mode in (PARAMETER_SERVER, HOROVOD) else None


STEPS_PER_EXECUTION = 32


def steps_per_execution(hp, mode: str) -> int:
    """Keras' steps_per_execution: Python's and the dispatch's cost per step paid once per
    call. Only where a pass may end inside a call: one process, or Horovod (whose ranks pad
    their data and agree when an epoch ends, equal_steps). Replicas of a strategy would
    reach the end of their data at different steps inside the call and mismatch their
    collectives; a parameter-server step is a remote closure; a profiler window counts calls."""
    if mode not in (SINGLE, HOROVOD):
        if (hp.steps_per_execution or 1) > 1:
            raise JobError(f"hyperparameter 'steps_per_execution': distribution {mode} runs one step per call "
                           "(its replicas could reach the end of their data at different steps inside a call); "
                           "set it to 1, or use single or horovod")
        return 1
    if hp.steps_per_execution is not None:
        return hp.steps_per_execution
    if hp.profile_steps is not None:
        return 1
    return min(STEPS_PER_EXECUTION, hp.log_steps)


def _check_hooks_mode(job: Job, mode: str, channels) -> None:
    """What the container's own training (built-in model or hooks) cannot do in `mode`."""
    hp = job.hyperparameters
    if mode in IN_PROCESS_MODES and len(job.hosts) > 1:
        raise JobError(f"distribution {mode} runs on one host; this job has {len(job.hosts)}: use horovod, "
                       "parameter_server or multi_worker_mirrored, or one instance")
    if mode == MULTI_WORKER_MIRRORED and channels[0].is_pipe:
        raise JobError("multi_worker_mirrored needs File mode: its workers count their batches before "
                       "training to run equal steps; for Pipe mode use horovod")
    if mode == PARAMETER_SERVER and channels[0].is_pipe:
        raise JobError("parameter_server reads its input on the workers through tf.data ops: Pipe mode "
                       "needs PipeModeDataset (the image has it); use File mode here")
    if hp.jit_compile and mode in (HOROVOD, PARAMETER_SERVER):
        # Horovod's collectives and a parameter-server step's remote reads have no XLA kernels.
        raise JobError(f"hyperparameter 'jit_compile': XLA cannot compile the training step of "
                       f"distribution {mode}; turn it off, or use single, tower, mirrored or "
                       "multi_worker_mirrored")
    if hp.tune_threads and (mode not in IN_PROCESS_MODES or channels[0].is_pipe):
        raise JobError(f"hyperparameter 'tune_threads': it tunes one process that owns its host, on File-mode "
                       f"data (a Pipe-mode FIFO carries the data once); this job is {mode} in "
                       f"{channels[0].input_mode} mode: turn it off, or run trainer tune beforehand")


NO_TRAINING_CHANNEL = "no channel named training: the script reads its channels (SM_CHANNEL_*) itself"


def _script_channels(job: Job) -> list:
    """A script's training channels, if it has channels named as ours (its rank's own
    channel and shard are then worked out as for the built-in model); else none."""
    try:
        return training_channels(job)
    except JobError:
        return []


def _input_mode(job: Job, channels) -> str:
    first = channels[0] if channels else next(iter(job.channels.values()), None)
    return first.input_mode if first else "File"


def _script_tf_config(job: Job, mode: str, host: str, rank: int, role: str) -> dict | None:
    if mode == PARAMETER_SERVER:
        return aws_ps_tf_config(job.hosts, host, ps_task=role == "ps")
    if mode == MULTI_WORKER_MIRRORED:
        return aws_mwms_tf_config(job.hosts, host)
    return None


def _entry(job: Job) -> str:
    if job.entry_point is None:
        return "built-in DeepFM" + (f" with hooks from {job.hyperparameters.user_module}"
                                    if job.hyperparameters.user_module.strip() else "")
    return f"{job.entry_point.kind} {job.entry_point.program}: {job.entry_point.why}"


def make_plan(job: Job) -> Plan:
    hp = job.hyperparameters
    mode, reason = choose_mode(job)
    hosts = len(job.hosts)
    script = is_script(job)
    channels = _script_channels(job) if script else training_channels(job)
    if not script:
        _check_hooks_mode(job, mode, channels)
    per_host = _processes_per_host(job, mode)
    replicas = _replicas(job, mode)
    if channels:
        shard, sharding = _sharding(job, channels, per_host)
    else:
        shard, sharding = (lambda host_index, local_rank: (1, 0)), NO_TRAINING_CHANNEL
    world = hosts * per_host

    processes = []
    ps_cluster_spec = ps_cluster(job.hosts) if mode == PARAMETER_SERVER else None
    for host_index, host in enumerate(job.hosts):
        for local_rank in range(per_host):
            rank = host_index * per_host + local_rank
            role = "chief" if rank == 0 and mode != PARAMETER_SERVER else "worker"
            tf_config = None
            if script:
                tf_config = _script_tf_config(job, mode, host, rank, role)
            elif mode == MULTI_WORKER_MIRRORED:
                cluster = mwms_cluster(job.hosts)
                task = {"type": "chief", "index": 0} if rank == 0 else {"type": "worker", "index": rank - 1}
                tf_config = {"cluster": cluster, "task": task}
            elif mode == PARAMETER_SERVER:
                tf_config = {"cluster": ps_cluster_spec, "task": {"type": "worker", "index": host_index}}
            processes.append(Process(
                host=host, role=role, rank=rank, local_rank=local_rank,
                channels=_channels_of(channels, local_rank, per_host),
                shard=shard(host_index, local_rank),
                eval_shard=None if mode == PARAMETER_SERVER else _eval_shard(job, mode, host_index, local_rank, per_host),
                gpu=local_rank if job.num_gpus else None,
                tf_config=tf_config))
        if mode == PARAMETER_SERVER:
            processes.append(Process(host=host, role="ps", rank=None, local_rank=0, channels=(), shard=(1, 0),
                                     eval_shard=None, gpu=None,
                                     tf_config=(_script_tf_config(job, mode, host, 0, "ps") if script else
                                                {"cluster": ps_cluster_spec, "task": {"type": "ps", "index": host_index}})))
    if mode == PARAMETER_SERVER and script:
        # AWS's layout: the script on the first host is the master (rank 0), the others workers.
        processes[0] = replace(processes[0], role="chief")
    elif mode == PARAMETER_SERVER:
        # The coordinator reads no training batches; it sees the whole training set (to
        # count an epoch's steps) and evaluates alone (P28).
        processes.insert(0, Process(host=job.hosts[0], role="chief", rank=None, local_rank=0,
                                    channels=tuple(c.name for c in channels), shard=(1, 0),
                                    eval_shard=_eval_shard(job, mode, 0, 0, 1), gpu=None,
                                    tf_config={"cluster": ps_cluster_spec, "task": {"type": "chief", "index": 0}}))

    synchronous = world * replicas if mode in SYNCHRONOUS_MODES else 1
    scale = float(synchronous) if hp.scale_learning_rate else 1.0
    return Plan(
        mode=mode, reason=reason, entry=_entry(job), hosts=job.hosts, current_host=job.current_host,
        input_mode=_input_mode(job, channels), processes_per_host=per_host, world_size=world,
        replicas_per_process=replicas, batch_size=hp.batch_size,
        steps_per_execution=1 if script else steps_per_execution(hp, mode),
        global_batch_size=hp.batch_size * world * replicas,
        learning_rate=hp.learning_rate * scale, learning_rate_scale=scale,
        warmup_steps=hp.warmup_steps if scale > 1 else 0,
        sharding=sharding, processes=tuple(processes), launch=_launch(job, mode, per_host),
        peer_waits=_peer_waits(job, mode), leader=_leader(job, mode),
        watch_peers=script and hosts > 1 and mode != HOROVOD)

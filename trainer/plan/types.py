"""What a plan is made of: its processes, how they are launched, and the plan itself."""
from __future__ import annotations

import enum
from dataclasses import asdict, dataclass, field

from trainer.plan.start import Start


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
    # What it reads on its host, under /opt/ml: a Pipe-mode channel's FIFOs
    # (input/data/<channel>_<epoch>, one per epoch; each has one reader, P1) or a File-mode
    # channel's folder.
    reads: tuple[str, ...] = ()

    @property
    def writes_outputs(self) -> bool:
        """Only the chief writes checkpoints and the model (see P8 in docs/pitfalls.md)."""
        return self.role == "chief"

    @property
    def name(self) -> str:
        """How logs and the failure file name it: "rank 1 on algo-2", "chief on algo-1"."""
        return f"rank {self.rank} on {self.host}" if self.rank is not None else f"{self.role} on {self.host}"


# Every host's `train` in a multi-host job answers here with its state (next to SageMaker's
# TensorFlow ports 2222-2224; trainer.supervision.peers).
STATUS_PORT = 2225
# A heterogeneous cluster's tf.data service: its dispatcher (on the first data host) and a
# worker on every data host.
DISPATCHER_PORT, DATA_WORKER_PORT = 2226, 2227
# A script's environment: the dispatcher, as distribute() takes it (grpc://host:port).
DATA_SERVICE_ENV = "TRAINER_DATA_SERVICE"


@dataclass(frozen=True)
class DataService:
    """A heterogeneous cluster's input work on the hosts of the groups that do not train: a
    tf.data service dispatcher on the first of them, a worker on each; the training
    processes read their batches through it (trainer.data.service)."""

    training_groups: tuple[str, ...]
    data_groups: tuple[str, ...]
    hosts: tuple[str, ...]  # the data hosts, each running a worker
    why: str  # which groups train, and why
    reading: str  # how the training processes read through it, and why
    # False: a user's script runs on the data hosts instead (data_hosts_run=script, as in
    # AWS's container), and starts there what it needs.
    serves: bool = True

    @property
    def dispatcher(self) -> str:
        return self.hosts[0]

    @property
    def address(self) -> str:
        """The dispatcher, as tf.data's distribute() takes it."""
        return f"grpc://{self.dispatcher}:{DISPATCHER_PORT}"


@dataclass(frozen=True)
class PeerWait:
    """Something on another host that must answer before this host goes on."""

    host: str
    port: int
    what: str  # how the log and the failure name it: "train", "ps task", "sshd"


@dataclass(frozen=True)
class SshTrust:
    """Root logins between the job's hosts over ssh, trusted for this job only (made at its
    start by trainer.launch.ssh_trust): the hosts in `logs_in` make a key pair each, the
    hosts in `accepts` run sshd and let in those keys from those hosts' addresses only."""

    logs_in: tuple[str, ...]
    accepts: tuple[str, ...]

    @classmethod
    def from_leader(cls, leader: str, hosts) -> "SshTrust":
        """mpirun on the leader starts the ranks of the other hosts through their sshd."""
        return cls((leader,), tuple(h for h in hosts if h != leader))

    @classmethod
    def everyone(cls, hosts) -> "SshTrust":
        """Drivers whose hosts log in to each other (the training toolkit's and the SDK's
        ModelTrainer's MPI drivers: the workers log in to the master too)."""
        return cls(tuple(hosts), tuple(hosts))


# What a launched process runs ("python": the launcher's interpreter): the container's
# training process, or a rank of the user's script (which sets that rank's environment,
# then becomes the script).
WORKER_COMMAND = ("python", "-m", "trainer.worker")
SCRIPT_RANK_COMMAND = ("python", "-m", "trainer.script.process")


class LaunchKind(str, enum.Enum):
    """How a host starts its processes; trainer.launch.host has one launcher per kind.

    A closed set on purpose: a mode declares its kind in the plan (`Mode.launch`), which is
    data a host prints, tests and hands on, and the launchers, higher in the house than the
    modes, map each kind to its mechanics; a mode naming its launcher function would import
    upwards. A new kind is a line here and a launcher there (docs/development.md, "Adding a
    mode")."""

    IN_PROCESS = "in_process"  # `train` itself is the training process
    MPIRUN = "mpirun"  # one host: mpirun starts the ranks
    SAGEMAKER_MPI = "sagemaker_mpi"  # several hosts: the training toolkit's MPI runner over sshd
    PARAMETER_SERVER = "parameter_server"  # a PS and a worker task per host, the coordinator on the first
    SCRIPT = "script"  # the user's training script, one process per host
    DATA_SERVICE = "data_service"  # a data host of a heterogeneous cluster: tf.data service tasks

    def __str__(self) -> str:
        return self.value


MPI_KINDS = (LaunchKind.MPIRUN, LaunchKind.SAGEMAKER_MPI)


@dataclass(frozen=True)
class Launch:
    kind: LaunchKind
    command: tuple[str, ...] = ()
    env: dict = field(default_factory=dict)
    cpu_binding: str = ""  # MPI: how a host's ranks share its CPUs (trainer.plan.mpi.cpu_binding)


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
    # MPI across hosts: who logs in to whom over ssh (None: no sshd runs anywhere).
    ssh_trust: SshTrust | None = None
    # A heterogeneous cluster whose groups that do not train feed the others (None: every
    # host trains). `hosts` above are then the training hosts only.
    data_service: DataService | None = None
    # What a user's script's processes get on top of the toolkit's environment (tf.keras as
    # Keras 2 on a Keras 3 line where the script needs it; trainer.tf_line), and why.
    script_environment: tuple[tuple[str, str], ...] = ()
    script_keras_2_why: str = ""
    # The interface MPI and the script are told (trainer.contract.network), and why it is not
    # the one resourceconfig.json names ("" where it is).
    network_interface: str = ""
    network_interface_why: str = ""
    network_interface_usable: bool = True  # False: named, absent, and no other clearly the job's
    # What training starts from: a restart's own checkpoint, another job's model, or nothing
    # (trainer.plan.start); None for a user's script.
    start: Start | None = None

    @property
    def job_hosts(self) -> tuple[str, ...]:
        """Every host of the job: the training hosts, then the data hosts."""
        return self.hosts + (self.data_service.hosts if self.data_service else ())

    def process(self, rank: int) -> Process:
        return next(p for p in self.processes if p.rank == rank)

    def on_host(self, host: str) -> list[Process]:
        return [p for p in self.processes if p.host == host]

    @property
    def chief(self) -> Process:
        return next(p for p in self.processes if p.role == "chief")

    def to_dict(self) -> dict:
        return asdict(self)

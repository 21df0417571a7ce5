"""What every mode is: the planner's rules for it (`Mode`) and what it changes inside a
training process (`Runtime`). A mode is one module in this package with a Mode subclass
decorated with @register; the planner and the `distribution` hyperparameter find it there.

Mode modules are imported to plan, and planning must not load TensorFlow (the launcher
and `trainer plan` stay light): runtimes reach TensorFlow through `tf` below, which
imports it on first use.
"""
from __future__ import annotations

import contextlib
import importlib

from trainer.errors import JobError
from trainer.plan.auto import named
from trainer.plan.types import SCRIPT_RANK_COMMAND, STATUS_PORT, Launch, LaunchKind, PeerWait, Process


class Deferred:
    """A module imported when one of its attributes is first read."""

    def __init__(self, name: str):
        self._name = name

    def __getattr__(self, attribute: str):
        return getattr(importlib.import_module(self._name), attribute)


tf = Deferred("tensorflow")
REGISTERED: dict[str, "Mode"] = {}


def modes_that(test) -> str:
    """The registered modes for which test(mode) holds, named for a message: "a, b or c"."""
    return named(mode for mode in REGISTERED.values() if test(mode))


def register(mode_class: type) -> type:
    """Class decorator: make a Mode known to the planner and the `distribution` hyperparameter."""
    mode = mode_class()
    if not mode.name or mode.name in REGISTERED:
        raise ValueError(f"mode {mode.name!r} of {mode_class.__qualname__}: no name, or one already registered")
    REGISTERED[mode.name] = mode
    return mode_class


class Runtime:
    """One process, no distribution. Modes override only what they change."""

    # Process -> that process's training EpochInput, built to run on that process's own host;
    # set by the training run for runtimes that build other processes' input (the
    # parameter-server coordinator does).
    input_for = None
    # The SIGTERM request (trainer.training.stop); set by the training run before prepare().
    stop_request = None
    # True where the processes vote inside every step on stopping (trainer.training.equal_steps,
    # installed by prepare()): a stop asked of one then ends the pass of all at the same step.
    stop_by_vote = False

    def __init__(self, plan, process, hyperparameters):
        self.plan = plan
        self.process = process
        self.hp = hyperparameters

    def start(self) -> None:
        """Right after TensorFlow is imported, before it runs anything (devices, collectives)."""

    def scope(self):
        """Where the model and optimizer are created."""
        return contextlib.nullcontext()

    def wrap_optimizer(self, optimizer):
        return optimizer

    def prepare(self, model, optimizer) -> None:
        """After compile, before the first step."""

    def sync_initial_state(self, model, optimizer) -> None:
        """After restoring a checkpoint: make every process start from the same state."""

    def callbacks(self) -> list:
        if not self.stop_by_vote:
            return []
        from trainer.training.equal_steps import StopWhenARankIsDone

        return [StopWhenARankIsDone(self.stop_request)]

    def stop_callbacks(self) -> list:
        """How fit stops at the next step once a stop is requested (voting: the flag is
        raised, and the vote ends the pass)."""
        from trainer.training.stop import StopAtNextStep

        return [StopAtNextStep(self.stop_request, agree=self.stop_by_vote)]

    def train_pass(self, model, train, epoch: int, pass_index: int, skip: int, callbacks: list,
                   channel_name: str, may_be_empty: bool) -> float | None:
        """Train epoch `epoch`'s pass over `train` (an EpochInput), `skip` batches into it;
        its mean loss (None: no step ran where `may_be_empty`)."""
        from trainer.training.keras_pass import fit_one_epoch

        dataset = train.dataset(pass_index, epoch, skip)
        steps = self.steps_per_epoch(dataset, skip)
        return fit_one_epoch(model, self.training_dataset(dataset), epoch, callbacks,
                             None if steps is None else max(0, steps - skip), channel_name, may_be_empty)

    def training_input(self, own):
        """The training input (an EpochInput) the job's training reads, as the log tells it:
        this process's own."""
        return own

    def pass_position(self) -> list[int]:
        """After a pass stopped early: how many batches of it each of the mode's own readers
        had trained (none: the steps of the job say it all); saved with the checkpoint and
        given back to a resumed run as `resume_position`."""
        return []

    resume_position: tuple = ()  # pass_position() of the run that stopped, read from its checkpoint

    def steps_per_epoch(self, dataset, skipped: int = 0) -> int | None:
        """Steps of a whole epoch; `dataset` is this process's pass, which starts `skipped`
        batches into the epoch (a resumed one). None: one pass over `dataset`."""
        return None

    def training_dataset(self, dataset):
        return dataset

    def all_reduce_sum(self, values: list) -> list:
        """Element-wise sums of numpy arrays over the processes that evaluate."""
        return values

    def broadcast_from_chief(self, value):
        return value

    @property
    def writes_outputs(self) -> bool:
        return self.process.writes_outputs

    # Whether a step is one batch of every training process, taken together (a step's
    # samples: the batch times the world size), or one process's batch alone (parameter servers).
    steps_in_lockstep = True

    # Where checkpoint and SavedModel files are written and read (None: by each variable's
    # own device). With parameter servers every PS would write its part to its own host's
    # disk; P26 wants them all on the chief's.
    io_device = None

    # Whether exporting the model is a collective operation every process must join (the
    # others then export to a scratch folder that is thrown away).
    export_is_collective = False

    @property
    def batch_size(self) -> int:
        """The batch one process feeds to fit: the plan's per-replica batch times its replicas."""
        return self.plan.batch_size * self.plan.replicas_per_process


class Mode:
    """One way to use the job's hosts and devices. The defaults describe one training
    process per host, ranked host by host, that the launcher runs in `train` itself (or
    the user's script, one per host); a mode overrides what it changes."""

    name = ""  # the `distribution` hyperparameter's value
    runtime = Runtime  # what the mode changes in a training process

    # What `auto` reads (trainer.plan.auto): the jobs this mode can train, and its speed
    # against the other modes that can.
    speed_rank: int | None = None  # lower is faster (bench modes, bench scale); None: only where asked for
    script_default = False  # what a training script that asks for no mode runs (AWS's container's way)
    sdk_key = ""  # the SDK's framework key that asks for it (trainer.plan.sdk.MODE_KEYS)
    min_hosts = 1
    min_devices = 1  # over all hosts: a host's GPUs, or the host itself where it has none
    max_devices: int | None = None
    exchange = ""  # how its hosts exchange what they learn (trainer.plan.scaling: GRADIENTS...)
    reads_from_a_data_group = True  # the container's own training can read through a data group

    # All of the host's training in one process that owns the host: one host only for the
    # container's own training, and the one case `tune_threads` tunes.
    in_process = False
    synchronous = True  # one update per global batch: the learning rate scales with it
    runs_scripts = True  # a user's script may ask for it (it builds its own strategy)
    sharded_evaluation = False  # every process evaluates its shard, the sums are all-reduced
    compiles_with_xla = True  # jit_compile can compile its training step
    multi_step_calls = False  # steps_per_execution > 1 (a pass may end inside a call)
    has_leader = False  # on several hosts, the first host's end is the job's end
    mpi_ranks = False  # its processes are MPI's ranks, started by mpirun (else by the launcher, with TF_CONFIG)
    keras_3_trains = True  # Keras 3's fit trains under this mode's strategy
    pipe_mode_refusal: str | None = None  # why the container's own training cannot use Pipe mode here

    def trains_on_gpus(self, line) -> bool:
        """Whether it trains on GPUs on the TensorFlow `line` (a trainer.tf_line.Line)."""
        return True

    def describe(self, job) -> str:
        """What it does with `job`'s hosts, for the plan's reason."""
        return ""

    def check(self, job, channels) -> None:
        """What the container's own training (built-in model or hooks) cannot do in this mode."""
        hp, hosts = job.hyperparameters, len(job.hosts)
        if self.in_process and hosts > 1:
            raise JobError(f"distribution {self.name} runs on one host; this job has {hosts}: use "
                           f"{modes_that(lambda mode: not mode.in_process)}, or one instance")
        if self.pipe_mode_refusal and channels[0].is_pipe:
            raise JobError(self.pipe_mode_refusal)
        if hp.jit_compile and not self.compiles_with_xla:
            raise JobError(f"hyperparameter 'jit_compile': XLA cannot compile the training step of "
                           f"distribution {self.name}; turn it off, or use "
                           f"{modes_that(lambda mode: mode.compiles_with_xla)}")
        if hp.tune_threads and (not self.in_process or channels[0].is_pipe):
            raise JobError(f"hyperparameter 'tune_threads': it tunes one process that owns its host, on File-mode "
                           f"data (a Pipe-mode FIFO carries the data once); this job is {self.name} in "
                           f"{channels[0].input_mode} mode: turn it off, or run trainer tune beforehand")

    def steps_per_call(self, hp, usual: int) -> int:
        """Keras' steps_per_execution for this mode, given what it would be (`usual`: the
        hyperparameter, else the planner's choice); only asked of multi_step_calls modes."""
        return usual

    def processes_per_host(self, job) -> int:
        requested = job.hyperparameters.processes_per_host
        if requested not in (None, 1):
            raise JobError(f"hyperparameter 'processes_per_host': {requested} is for horovod; "
                           f"distribution {self.name} runs one training process per host")
        return 1

    def replicas(self, job) -> int:
        """Replicas inside one process."""
        return 1

    def processes(self, layout) -> list[Process]:
        """Every process of the job, host by host."""
        return [layout.process(host_index, local_rank, "chief" if (host_index, local_rank) == (0, 0) else "worker",
                               layout.eval_shard(host_index, local_rank, self.sharded_evaluation),
                               self.tf_config(layout, host_index, local_rank))
                for host_index in range(len(layout.hosts)) for local_rank in range(layout.per_host)]

    def tf_config(self, layout, host_index: int, local_rank: int) -> dict | None:
        """A training process's TF_CONFIG (None: none set)."""
        return None

    def launch(self, job, per_host: int) -> Launch:
        if job.runs_script:
            return Launch(LaunchKind.SCRIPT, SCRIPT_RANK_COMMAND)
        return Launch(LaunchKind.IN_PROCESS)

    def peer_waits(self, job) -> tuple[PeerWait, ...]:
        """Before multi-host work, every host waits for every other host's `train` to answer."""
        return tuple(PeerWait(h, STATUS_PORT, "train") for h in job.hosts if h != job.current_host)

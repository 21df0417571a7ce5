"""The single-process runtime, and the interface every mode's runtime keeps."""
from __future__ import annotations

import contextlib


class Runtime:
    """One process, no distribution. Modes override only what they change."""

    # Process -> that process's training EpochInput; set by the training run for runtimes
    # that build other processes' input (the parameter-server coordinator does).
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

    # Whether Keras may call callbacks every batch (not with parameter servers).
    batch_callbacks = True

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

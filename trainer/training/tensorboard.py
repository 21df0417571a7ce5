"""TensorBoard scalars, written as the job runs where SageMaker uploads them live (the job's
TensorBoardOutputConfig, by default /opt/ml/output/tensorboard: trainer.contract.job).

The runs under that folder, each written by one process only (one writer per file):

- `train` (the chief): `loss`, `samples_per_sec` (the job's) and `learning_rate`, by step,
  every `log_steps` steps (modes without per-step callbacks: at each epoch's end);
- `epoch` (the chief): what the epoch ended with, by epoch: Keras' logs (`loss`, and a
  script's own metrics and `val_*`) and the built-in model's `eval_auc`, `eval_logloss`;
- `rank-<r>` (every training process, when there are several): `samples_per_sec` of that
  process alone, by step, so that one rank that runs behind shows;
- `profile` (the chief, with `profile_steps`): TensorFlow's profiler trace.

Files are flushed every FLUSH_SECONDS and at every epoch's end, so an upload that runs
while the job trains shows its progress within a minute. Keras' own TensorBoard callback
is not used for the scalars: it flushes every two minutes, writes nothing of the job's
throughput, and Keras allows it no per-step summaries with parameter servers.
"""
from __future__ import annotations

import os
import time

import tensorflow as tf

from trainer.training.callbacks import optimizer_updates

FLUSH_SECONDS = 10
TRAIN_RUN, EPOCH_RUN, PROFILE_RUN = "train", "epoch", "profile"


def rank_run(rank: int) -> str:
    return f"rank-{rank}"


def planned_runs(rank: int, chief: bool, several_processes: bool) -> tuple[str, ...]:
    """The runs one training process writes."""
    return (TRAIN_RUN, EPOCH_RUN) * chief + (rank_run(rank),) * several_processes


class Runs:
    """This process's writers, one per planned run, under `root`."""

    def __init__(self, root: str, runs: tuple[str, ...]):
        self.root = root
        self._writers = {run: tf.summary.create_file_writer(os.path.join(root, run), flush_millis=FLUSH_SECONDS * 1000)
                         for run in runs}

    def write(self, run: str, step: int, scalars: dict) -> None:
        """Scalars of `run` at `step` (nothing if this process does not write that run)."""
        writer = self._writers.get(run)
        if writer is None:
            return
        with writer.as_default(step=int(step)):
            for name, value in scalars.items():
                if value is not None:
                    tf.summary.scalar(name, float(value))

    def flush(self) -> None:
        for writer in self._writers.values():
            writer.flush()

    def close(self) -> None:
        for writer in self._writers.values():
            writer.close()


def current_learning_rate(optimizer) -> float | None:
    """The optimizer's learning rate at its current step (a schedule evaluated), or None
    when it has none that can be read (a wrapped or custom optimizer)."""
    try:
        rate = optimizer.learning_rate
        if callable(rate):
            rate = rate(optimizer.iterations)
        return float(tf.keras.backend.get_value(rate))
    except (AttributeError, TypeError, ValueError):
        return None


class StepScalars(tf.keras.callbacks.Callback):
    """Writes the runs' scalars every `log_steps` steps, and each epoch's at its end.
    `samples_per_step`: this process's batch (its rank run's rate); `world_size` processes
    train in step (the job's rate)."""

    def __init__(self, runs: Runs, samples_per_step: int, world_size: int, rank: int, log_steps: int):
        super().__init__()
        self.runs, self.samples_per_step, self.world_size = runs, samples_per_step, world_size
        self.rank_run = rank_run(rank)
        self.log_steps = max(1, log_steps)
        self._window = None  # (step, time) the current window started at
        self._flushed = time.monotonic()

    def on_epoch_begin(self, epoch, logs=None):
        self._window = None  # the first call of a fit traces the graph: not timed

    def on_train_batch_end(self, batch, logs=None):
        if self._window is None:
            self._window = (optimizer_updates(self.model), time.perf_counter())
        elif optimizer_updates(self.model) // self.log_steps > self._window[0] // self.log_steps:
            self._write_window(logs)

    def on_epoch_end(self, epoch, logs=None):
        self._window = None  # the epoch's last steps, if fewer than log_steps, are the next window's
        self.runs.write(EPOCH_RUN, epoch + 1, dict(logs or {}))
        self.runs.flush()
        self._flushed = time.monotonic()

    def _write_window(self, logs) -> None:
        step, now = optimizer_updates(self.model), time.perf_counter()
        first_step, started = self._window
        self._window = (step, now)
        if step <= first_step or now <= started:
            return
        own_rate = (step - first_step) * self.samples_per_step / (now - started)
        self.runs.write(TRAIN_RUN, step, {"loss": (logs or {}).get("loss"), "samples_per_sec": own_rate * self.world_size,
                                          "learning_rate": current_learning_rate(self.model.optimizer)})
        self.runs.write(self.rank_run, step, {"samples_per_sec": own_rate})
        if time.monotonic() - self._flushed >= FLUSH_SECONDS:
            self.runs.flush()
            self._flushed = time.monotonic()

"""What a training process tells while it trains: its samples per second (the job's) and
the watchdog's heartbeat, after every call into TensorFlow (parameter servers: every
round of calls the coordinator sends, trainer.training.coordinated)."""
from __future__ import annotations

import logging
import time

import tensorflow as tf

log = logging.getLogger(__name__)


def optimizer_updates(model) -> int:
    # Steps are counted as the optimizer's updates: Keras calls back once per
    # steps_per_execution steps, and a step where the ranks agreed to end the epoch
    # (equal_steps) makes none.
    return int(model.optimizer.iterations.numpy())


class Throughput(tf.keras.callbacks.Callback):
    """Logs `step=N epoch=E loss=L samples/sec=S` when a multiple of `log_steps` steps is
    passed (Keras calls back once per steps_per_execution steps).

    The rate is the job's samples per second: `samples_per_step` is a step's samples over
    every process. It excludes the first call of each fit (graph tracing, the first
    window's parse) unless nothing else ran; an epoch's last, partial batch counts as a
    full one.
    """

    def __init__(self, samples_per_step: int, log_steps: int, prints: bool = True):
        super().__init__()
        self.samples_per_step = samples_per_step
        self.timed_steps = 0
        self.timed_seconds = 0.0
        self.log_steps = log_steps
        self.prints = prints  # only the chief prints progress lines
        self.first_calls = [0, 0.0]  # steps and seconds of the calls left out

    def on_train_begin(self, logs=None):
        self.step = optimizer_updates(self.model)
        self.window_start = None
        self.window_steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_begin(self, batch, logs=None):
        if self.window_start is None:
            self.call_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        step, now = optimizer_updates(self.model), time.perf_counter()
        if self.window_start is None:  # first call of this fit: tracing, not timed
            self.first_calls[0] += step - self.step
            self.first_calls[1] += now - self.call_start
            self.window_start, self.step = now, step
            return
        self.window_steps += step - self.step
        log_now = step // self.log_steps > self.step // self.log_steps
        self.step = step
        if log_now:
            self._close_window(now, logs)

    def on_train_end(self, logs=None):
        step, now = optimizer_updates(self.model), time.perf_counter()  # the pass may end inside a call, with no call back
        if self.window_start is None:  # ... inside its first: that call is the first one, untimed
            if step > self.step:
                self.first_calls[0] += step - self.step
                self.first_calls[1] += now - self.call_start
                self.step = step
            return
        self.window_steps += step - self.step
        self.step = step
        self._close_window(now, None)

    def _close_window(self, now, logs):
        seconds = now - self.window_start
        if self.window_steps and seconds > 0:
            self.timed_steps += self.window_steps
            self.timed_seconds += seconds
            if logs is not None and self.prints:
                rate = self.window_steps * self.samples_per_step / seconds
                log.info("step=%d epoch=%d loss=%.5f samples/sec=%.1f",
                         self.step, self.epoch, logs.get("loss", float("nan")), rate)
        self.window_start, self.window_steps = now, 0

    @property
    def samples_per_sec(self) -> float:
        if self.timed_seconds:
            return self.timed_steps * self.samples_per_step / self.timed_seconds
        steps, seconds = self.first_calls
        return steps * self.samples_per_step / seconds if seconds else 0.0


class Heartbeat(tf.keras.callbacks.Callback):
    """Tells the watchdog each call into TensorFlow made progress."""

    def __init__(self, watchdog):
        super().__init__()
        self.watchdog = watchdog

    def on_train_batch_end(self, batch, logs=None):
        self.watchdog.progress(optimizer_updates(self.model))


def progress_callbacks(runtime, plan, log_steps: int, watchdog) -> tuple[Throughput, Heartbeat]:
    """(throughput, heartbeat) of a training process."""
    samples_per_step = runtime.batch_size * (plan.world_size if runtime.steps_in_lockstep else 1)
    return Throughput(samples_per_step, log_steps, runtime.writes_outputs), Heartbeat(watchdog)

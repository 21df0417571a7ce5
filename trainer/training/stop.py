"""SIGTERM (SageMaker's StopTrainingJob, a spot interruption): stop at the next step, save, go.

SageMaker sends SIGTERM and, a while later, SIGKILL. The training process stops at the
end of its next call into TensorFlow, the chief saves a checkpoint that records how far
into the epoch it got, and the process ends with EXIT_STOPPED; a job started again with the
same checkpoint dir resumes at that step of that epoch. If the process cannot get there
within STOP_GRACE_SEC (blocked reading a FIFO, say) it says so and ends anyway.

Processes that train in lockstep (Horovod) must stop at the same step or the ones still
stepping wait forever in an all-reduce: they agree through the step's own collective
(trainer.training.equal_steps), which the request feeds with a flag variable.
"""
from __future__ import annotations

import logging
import os
import signal
import threading

import tensorflow as tf

from trainer.report import EXIT_STOPPED, STOP_GRACE_SEC, write_failure

log = logging.getLogger("trainer")


class StopRequest:
    """Installs the SIGTERM handler; `requested` tells the training loop to stop."""

    def __init__(self, who: str, output_dir: str, grace_sec: float = STOP_GRACE_SEC):
        self.who = who
        self.output_dir = output_dir
        self.grace_sec = grace_sec
        self.requested = False
        self.interrupted_pass = False  # set when a pass ended early because of the request
        # Read by the train step where ranks must agree (equal_steps): 1 once requested.
        self.flag = tf.Variable(0.0, trainable=False, name="stop_requested")

    def install(self) -> "StopRequest":
        if threading.current_thread() is threading.main_thread():  # signals reach the main thread only
            signal.signal(signal.SIGTERM, self._on_signal)
        return self

    def _on_signal(self, signum, frame) -> None:
        if self.requested:
            return
        self.requested = True
        log.warning("%s: SIGTERM: stopping at the next step, then saving a checkpoint (at most %.0f s)",
                    self.who, self.grace_sec)
        timer = threading.Timer(self.grace_sec, self._out_of_time)
        timer.daemon = True
        timer.start()

    def _out_of_time(self) -> None:
        reason = (f"{self.who}: stopped by SIGTERM; could not reach a step boundary and save within "
                  f"{self.grace_sec:.0f} s, so nothing was saved after the last checkpoint")
        log.error("%s", reason)
        write_failure(self.output_dir, reason)
        os._exit(EXIT_STOPPED)

    def callback(self) -> tf.keras.callbacks.Callback:
        return StopAtNextStep(self)


class StopAtNextStep(tf.keras.callbacks.Callback):
    """Ends fit after the call in which a stop was requested. With `agree` (ranks in
    lockstep) it raises the flag instead, and the ranks' agreement ends the pass."""

    def __init__(self, request: StopRequest, agree: bool = False):
        super().__init__()
        self.request = request
        self.agree = agree

    def on_train_batch_end(self, batch, logs=None):
        if not self.request.requested:
            return
        if self.agree:
            self.request.flag.assign(1.0)
        else:
            self.request.interrupted_pass = True
            self.model.stop_training = True

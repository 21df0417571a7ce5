"""What the chief writes: checkpoints (to resume from, also mid-epoch) and the SavedModel."""
from __future__ import annotations

import logging
import os
import shutil

import tensorflow as tf

log = logging.getLogger(__name__)


class Checkpoints:
    """The training state in `directory`: the model, the compiled optimizer (under
    mixed_float16 the loss-scale wrapper, whose scale is state too), the epochs done and,
    after a stop inside an epoch, the steps of the next epoch done (and, where the mode's
    readers each went their own way, how far each got: the runtime's pass_position)."""

    def __init__(self, model, directory: str, keep: int, io_device: str | None):
        self.directory = directory
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_step")  # >0: stopped mid-epoch
        self.pass_position = tf.Variable(tf.zeros([0], tf.int64), trainable=False, shape=tf.TensorShape([None]),
                                         name="pass_position")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=self.epoch,
                                              epoch_step=self.epoch_step, pass_position=self.pass_position)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=keep)
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)

    def restore_latest(self) -> None:
        latest = self.manager.latest_checkpoint
        if latest:
            self.checkpoint.restore(latest, options=self.options).expect_partial()
            into = int(self.epoch_step)
            log.info("resumed from %s: %d epochs and %d steps done%s", latest, int(self.epoch),
                     int(self.checkpoint.optimizer.iterations.numpy()),
                     f" ({into} steps into epoch {int(self.epoch) + 1})" if into else "")

    def save(self, step: int) -> None:
        self.manager.save(checkpoint_number=step, options=self.options)


def export_saved_model(model, model_dir: str, version: int, io_device: str | None = None,
                       signatures: dict | None = None) -> str:
    """SavedModel in TF Serving's layout: <model_dir>/<version>/saved_model.pb; `signatures`
    replace Keras' own (trainer.data.raw_features.serving_signatures)."""
    path = os.path.join(model_dir, str(version))
    if os.path.exists(path):
        shutil.rmtree(path)
    model.save(path, include_optimizer=False, save_format="tf", signatures=signatures,
               options=tf.saved_model.SaveOptions(experimental_io_device=io_device))
    return path

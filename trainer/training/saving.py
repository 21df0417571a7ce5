"""What the chief writes and starts from: checkpoints (to resume from, also mid-epoch; to
warm-start another job from) and the SavedModel."""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import tempfile

import numpy as np
import tensorflow as tf

from trainer.contract import checkpoint_folder as folder
from trainer.contract.model_channel import RECORD, find_model, unpacked
from trainer.errors import JobError
from trainer.plan.start import Source, Start, refuse_another_shape

log = logging.getLogger(__name__)


class Unreadable(Exception):
    """A checkpoint or model whose files cannot be read (truncated, damaged, missing)."""


class Checkpoints:
    """The training state in `directory`: the model, the compiled optimizer (under
    mixed_float16 the loss-scale wrapper, whose scale is state too), the epochs done and,
    after a stop inside an epoch, the steps of the next epoch done (and, where the mode's
    readers each went their own way, how far each got: the runtime's pass_position).

    `written_by`: what each checkpoint's record says made it (trainer.contract.checkpoint_folder):
    the job's name, the built-in model's shape (None for hooks' models), the optimizer."""

    def __init__(self, model, directory: str, keep: int, io_device: str | None, written_by: dict):
        self.model, self.directory, self.written_by = model, directory, written_by
        self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_step")  # >0: stopped mid-epoch
        self.pass_position = tf.Variable(tf.zeros([0], tf.int64), trainable=False, shape=tf.TensorShape([None]),
                                         name="pass_position")
        self.checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=self.epoch,
                                              epoch_step=self.epoch_step, pass_position=self.pass_position)
        self.manager = tf.train.CheckpointManager(self.checkpoint, directory, max_to_keep=keep)
        self.options = tf.train.CheckpointOptions(experimental_io_device=io_device)
        # Checkpoint numbers are this offset plus the step: a job that starts from step 0 beside
        # another job's checkpoints numbers its own after them.
        self.number_offset = 0

    @property
    def optimizer(self):
        return self.model.optimizer

    def begin(self, start: Start, model_channel=None) -> Source | None:
        """Carry out `start`: the first of its sources that can be read (each one that cannot
        is named, and a checkpoint set aside); the source used, None from scratch.
        `model_channel`: the job's model channel (a model source's)."""
        self.number_offset = max((r.number for r in folder.checkpoints_in(self.directory)), default=0)
        tried = []
        for source in start.sources:
            try:
                if source.kind == "checkpoint":
                    self._from_checkpoint(source)
                else:
                    self._from_model(model_channel)
                return source
            except Unreadable as err:
                tried.append(f"{source.path}: {err}")
                aside = f"; moved to {folder.set_aside(source.path)}" if source.kind == "checkpoint" else ""
                log.warning("cannot read %s (%s)%s; %s", source.describe(), err, aside,
                            "trying the next" if len(tried) < len(start.sources) else "none left")
        if tried:
            raise JobError(f"no checkpoint or model to start from can be read (checkpoint folder {self.directory}); "
                           "tried: " + "; ".join(tried))
        log.info("start: %s", start.describe())
        return None

    def _from_checkpoint(self, source: Source) -> None:
        record = next((r for r in folder.checkpoints_in(self.directory) if r.prefix == source.path), None)
        if record is not None:
            refuse_another_shape(record.model, self.written_by["model"] or {}, f"checkpoint {source.path}")
        same_optimizer = record is None or record.optimizer in (None, self.written_by["optimizer"])
        whole = source.resume or same_optimizer
        state = self.checkpoint if whole else tf.train.Checkpoint(model=self.model)
        _read(state, source.path, self.options, f"checkpoint {source.path}", must_restore=self.model.weights)
        if source.resume:  # numbered on as it was (a checkpoint without a record: by its step)
            self.number_offset = record.number - record.step if record is not None and record.step is not None else 0
            into = int(self.epoch_step)
            log.info("resumed from %s: %d epochs and %d steps done%s", source.path, int(self.epoch),
                     int(self.optimizer.iterations.numpy()),
                     f" ({into} steps into epoch {int(self.epoch) + 1})" if into else "")
            return
        self._from_step_0()
        log.info("warm start from %s: its weights%s loaded; this job trains its own epochs from step 0",
                 source.describe(), " and optimizer state" if whole else
                 f" (not its optimizer state: {record.optimizer} there, {self.written_by['optimizer']} here)")

    def _from_model(self, channel) -> None:
        """Warm start from the model channel's SavedModel (its archive unpacked for the while)."""
        found = find_model(channel)
        with tempfile.TemporaryDirectory(prefix="trainer-model-channel-") as scratch:
            found = unpacked(found, scratch)
            what = f"channel '{channel.name}' ({found.describe()})"
            refuse_another_shape((found.record or {}).get("model"), self.written_by["model"] or {}, what)
            _read(tf.train.Checkpoint(root=self.model), os.path.join(found.saved_model, "variables", "variables"),
                  self.options, what, must_restore=self.model.weights)
        self._from_step_0()
        record = found.record or {}
        made_by = ", ".join(part for part in (
            f"job {record['job']}" if record.get("job") else "", f"{record['epoch']} epochs" if "epoch" in record
            else "") if part) or "its job not recorded"
        log.info("warm start from channel '%s' (%s, %s): its weights loaded; this job trains its own epochs "
                 "from step 0", channel.name, found.describe(), made_by)

    def _from_step_0(self) -> None:
        """Weights from another job: this job's own epochs, steps and input from the start."""
        self.epoch.assign(0)
        self.epoch_step.assign(0)
        self.pass_position.assign(tf.zeros([0], tf.int64))
        self.optimizer.iterations.assign(0)

    def save(self, step: int) -> None:
        number = self.number_offset + step
        prefix = os.path.join(self.directory, f"ckpt-{number}")
        os.makedirs(self.directory, exist_ok=True)
        folder.write_record(folder.CheckpointRecord(
            prefix, number, self.written_by["job"], int(self.epoch.numpy()), int(self.epoch_step.numpy()), step,
            self.written_by["model"], self.written_by["optimizer"]))
        self.manager.save(checkpoint_number=number, options=self.options)
        folder.prune_records(self.directory, self.manager.checkpoints)


def weights_fingerprint(model) -> str:
    """A short hash of the model's weights: equal on two processes, or in two jobs, exactly
    when their weights are (what a warm start loaded is what the previous job exported)."""
    digest = hashlib.sha256()
    for variable in model.weights:
        digest.update(np.ascontiguousarray(variable.numpy()).tobytes())
    return digest.hexdigest()[:16]


def _read(state: tf.train.Checkpoint, prefix: str, options, what: str, must_restore=()) -> None:
    """Restore `state` from `prefix`: Unreadable where its files cannot be read, a JobError
    where its variables have other shapes than the model's, or where any of `must_restore`
    (a SavedModel's: the model's weights, not its optimizer's) is not in it. `what` names it."""
    try:
        status = state.read(prefix, options=options)
        status.expect_partial()
    except tf.errors.OpError as err:
        raise Unreadable(_first_line(getattr(err, "message", "") or str(err))) from None
    except ValueError as err:
        if "incompatible" in str(err) or "shape" in str(err):
            raise JobError(f"{what} holds a model of another shape: {_first_line(str(err))}") from None
        raise Unreadable(_first_line(str(err))) from None
    except (IndexError, OSError) as err:  # TensorFlow's reader's word for a file cut short, among others
        raise Unreadable(_first_line(str(err))) from None
    # A variable restored is stamped with the restore's id (what assert_existing_objects_matched
    # reads; that assertion would also ask for the optimizer's slots, which a SavedModel lacks).
    # Checked on plain variables: a strategy's own (mirrored, sharded) are restored its way.
    restore_uid = getattr(getattr(status, "_checkpoint", None), "restore_uid", None)
    missing = [v.name for v in must_restore if restore_uid is not None and _plain(v)
               and getattr(v, "_update_uid", restore_uid) < restore_uid]
    if missing:
        raise JobError(f"{what} is not this model's: {len(missing)} of its {len(must_restore)} variables are not "
                       f"there ({', '.join(missing[:5])}{', ...' if len(missing) > 5 else ''})")


def _plain(variable) -> bool:
    inner = getattr(variable, "_variable", variable)  # mixed precision's AutoCastVariable wraps one
    return type(inner).__name__ in ("ResourceVariable", "UninitializedVariable")


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:300] if text.strip() else "unreadable"


def export_saved_model(model, model_dir: str, version: int, io_device: str | None = None,
                       signatures: dict | None = None, record: dict | None = None) -> str:
    """SavedModel in TF Serving's layout: <model_dir>/<version>/saved_model.pb; `signatures`
    replace Keras' own (trainer.data.raw_features.serving_signatures); `record` (the job, its
    epochs, the model's shape) goes beside it, for the next job that starts from it."""
    path = os.path.join(model_dir, str(version))
    if os.path.exists(path):
        shutil.rmtree(path)
    model.save(path, include_optimizer=False, save_format="tf", signatures=signatures,
               options=tf.saved_model.SaveOptions(experimental_io_device=io_device))
    if record is not None:
        os.makedirs(os.path.dirname(os.path.join(path, RECORD)), exist_ok=True)
        with open(os.path.join(path, RECORD), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
    return path

"""One training process: input, model, epochs, evaluation, checkpoints, export, metrics."""
from __future__ import annotations

import contextlib
import logging
import os
import shutil
import time
from dataclasses import dataclass

import tensorflow as tf

from trainer import hooks as user_hooks
from trainer.contract.channels import pick_eval_channel, pick_train_channel
from trainer.contract.job import Job
from trainer.data import diagnose
from trainer.data.pipeline import EpochInput, InputSpec, should_cache
from trainer.errors import JobError
from trainer.report import write_metrics

log = logging.getLogger(__name__)
AUC_THRESHOLDS = 1000
INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.DataLossError, tf.errors.UnknownError,
                tf.errors.OutOfRangeError)


class Throughput(tf.keras.callbacks.Callback):
    """Logs `step=N epoch=E loss=L samples/sec=S` every `log_steps` steps.

    The rate excludes the first step of each fit (graph tracing), so it measures training.
    The last, partial batch of an epoch counts as a full one.
    """

    def __init__(self, batch_size: int, log_steps: int):
        super().__init__()
        self.batch_size = batch_size
        self.log_steps = log_steps
        self.timed_steps = 0
        self.timed_seconds = 0.0

    def on_train_begin(self, logs=None):
        self.step = int(self.model.optimizer.iterations.numpy())
        self.window_start = None
        self.window_steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def on_train_batch_end(self, batch, logs=None):
        self.step += 1
        now = time.perf_counter()
        if self.window_start is None:  # first step of this fit: tracing, not timed
            self.window_start = now
            return
        self.window_steps += 1
        if self.step % self.log_steps == 0:
            self._close_window(now, logs)

    def on_train_end(self, logs=None):
        if self.window_start is not None:
            self._close_window(time.perf_counter(), None)

    def _close_window(self, now, logs):
        seconds = now - self.window_start
        if self.window_steps and seconds > 0:
            self.timed_steps += self.window_steps
            self.timed_seconds += seconds
            if logs is not None:
                rate = self.window_steps * self.batch_size / seconds
                log.info("step=%d epoch=%d loss=%.5f samples/sec=%.1f",
                         self.step, self.epoch, logs.get("loss", float("nan")), rate)
        self.window_start, self.window_steps = now, 0

    @property
    def samples_per_sec(self) -> float:
        return self.timed_steps * self.batch_size / self.timed_seconds if self.timed_seconds else 0.0


class Evaluator:
    """AUC and logloss of the model over one pass of a dataset (Keras metrics).

    Built once per run so its step function is traced once, not once per epoch.
    """

    def __init__(self, model):
        self.model = model
        self.auc = tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS)
        self.logloss = tf.keras.metrics.BinaryCrossentropy()
        self._update = tf.function(self._update_step, reduce_retracing=True)

    def _update_step(self, features, labels):
        predictions = self.model(features, training=False)
        self.auc.update_state(labels, predictions)
        self.logloss.update_state(labels, predictions)
        return tf.shape(labels)[0]

    def __call__(self, dataset, channel_name: str) -> dict:
        self.auc.reset_state()
        self.logloss.reset_state()
        examples = 0
        for features, labels in dataset:
            examples += int(self._update(features, labels))
        if not examples:
            raise JobError(f"channel '{channel_name}' holds no records to evaluate on")
        return {"auc": float(self.auc.result()), "logloss": float(self.logloss.result()),
                "examples": examples}


@contextlib.contextmanager
def input_errors_explained(specs, hooks, hp):
    """Re-raise TensorFlow's input errors as JobErrors naming the channel, file and line."""
    try:
        yield
    except INPUT_ERRORS as err:
        explained = diagnose.job_error_inside(err)
        if explained is None and not hooks.custom_parse:
            explained = diagnose.explain(err, specs, hp.field_size, hp.feature_size)
        if explained is None:
            raise
        raise explained from err


def fit_one_epoch(model, dataset, epoch: int, throughput: Throughput, channel_name: str) -> float:
    """One pass of Keras fit; returns the epoch's mean loss."""
    try:
        fit = model.fit(dataset, initial_epoch=epoch, epochs=epoch + 1, verbose=0, callbacks=[throughput])
    except ValueError as err:
        if "Empty logs" not in str(err):  # Keras' words for a pass that saw no batch
            raise
        raise JobError(f"channel '{channel_name}' holds no records to train on") from err
    return float(fit.history["loss"][-1])


def export_saved_model(model, model_dir: str, version: int) -> str:
    """SavedModel in TF Serving's layout: <model_dir>/<version>/saved_model.pb."""
    path = os.path.join(model_dir, str(version))
    if os.path.exists(path):
        shutil.rmtree(path)
    model.save(path, include_optimizer=False, save_format="tf")
    return path


@dataclass
class Inputs:
    """The channels this process reads, as specs (for error diagnosis) and epoch datasets."""

    train_spec: InputSpec
    train: EpochInput
    eval_spec: InputSpec | None
    eval: EpochInput | None

    @property
    def specs(self) -> list[InputSpec]:
        return [spec for spec in (self.train_spec, self.eval_spec) if spec]

    @staticmethod
    def for_job(job: Job, hooks) -> "Inputs":
        hp = job.hyperparameters
        train_spec = InputSpec.for_channel(pick_train_channel(job), hp.data_format)
        train = EpochInput(train_spec, hooks.parse_fn(train_spec.data_format), hp.batch_size,
                           hp.shuffle_buffer, hp.seed, should_cache(hp.cache_input, train_spec),
                           hp.pipe_wait_sec)
        eval_channel = pick_eval_channel(job)
        if eval_channel is None:
            return Inputs(train_spec, train, None, None)
        eval_spec = InputSpec.for_channel(eval_channel, hp.data_format)
        evaluation = EpochInput(eval_spec, hooks.parse_fn(eval_spec.data_format), hp.batch_size,
                                cache=should_cache(hp.cache_input, eval_spec), pipe_wait_sec=hp.pipe_wait_sec)
        return Inputs(train_spec, train, eval_spec, evaluation)

    def describe(self) -> str:
        text = (f"training channel '{self.train_spec.channel.name}' ({self.train_spec.channel.input_mode}, "
                f"{self.train_spec.data_format}, cache={self.train.cache})")
        return text + (f"; evaluation channel '{self.eval_spec.channel.name}'" if self.eval_spec
                       else "; no evaluation channel")


def restore_latest(checkpoint, manager) -> None:
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint).expect_partial()
        log.info("resumed from %s: %d epochs and %d steps done", manager.latest_checkpoint,
                 int(checkpoint.epoch), int(checkpoint.optimizer.iterations))


def train(job: Job, cpu_settings=None) -> dict:
    hp = job.hyperparameters
    hooks = user_hooks.resolve(job)
    inputs = Inputs.for_job(job, hooks)
    log.info("model: %s; %s", hooks.source, inputs.describe())

    tf.keras.utils.set_random_seed(hp.seed)
    model = hooks.model_fn()
    optimizer = hooks.optimizer_fn()
    model.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy())

    epoch_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    checkpoint = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_counter)
    manager = tf.train.CheckpointManager(checkpoint, job.checkpoint_dir, max_to_keep=hp.keep_checkpoints)
    restore_latest(checkpoint, manager)
    start_epoch = int(epoch_counter)

    throughput = Throughput(hp.batch_size, hp.log_steps)
    evaluator = Evaluator(model)

    def evaluate(epoch_number: int, pass_index: int) -> dict:
        log.info("epoch=%d evaluating on channel '%s'", epoch_number, inputs.eval_spec.channel.name)
        with input_errors_explained(inputs.specs, hooks, hp):
            result = evaluator(inputs.eval.dataset(pass_index), inputs.eval_spec.channel.name)
        return {"eval_auc": result["auc"], "eval_logloss": result["logloss"]}

    history = []
    train_seconds = 0.0
    for epoch in range(start_epoch, hp.num_epochs):
        pass_index = epoch - start_epoch  # Pipe mode: FIFOs count from 0 in every run
        started = time.perf_counter()
        with input_errors_explained(inputs.specs, hooks, hp):
            loss = fit_one_epoch(model, inputs.train.dataset(pass_index), epoch, throughput,
                                 inputs.train_spec.channel.name)
        train_seconds += time.perf_counter() - started
        record = {"epoch": epoch + 1, "train_loss": loss}
        if inputs.eval:
            record.update(evaluate(epoch + 1, pass_index))
        history.append(record)
        log.info("epoch=%d steps=%d train_loss=%.5f%s samples/sec=%.1f", epoch + 1,
                 int(optimizer.iterations), loss,
                 f" eval_auc={record['eval_auc']:.5f} eval_logloss={record['eval_logloss']:.5f}"
                 if inputs.eval else "", throughput.samples_per_sec)
        epoch_counter.assign(epoch + 1)
        log.info("epoch=%d saving checkpoint to %s", epoch + 1, job.checkpoint_dir)
        manager.save(checkpoint_number=int(optimizer.iterations))

    if inputs.eval and not history:  # resumed after the last epoch: evaluate what was restored
        history.append({"epoch": start_epoch, **evaluate(start_epoch, 0)})

    export_dir = export_saved_model(model, job.model_dir, hp.model_version)
    log.info("exported SavedModel to %s", export_dir)
    last = history[-1] if history else {}
    metrics = {
        "eval_auc": last.get("eval_auc"),
        "eval_logloss": last.get("eval_logloss"),
        "train_loss": last.get("train_loss"),
        "train_samples_per_sec": round(throughput.samples_per_sec, 1),
        "train_seconds": round(train_seconds, 3),
        "epochs": int(epoch_counter),
        "steps": int(optimizer.iterations),
        "resumed_from_epoch": start_epoch,
        "history": history,
        "model": hooks.source,
        "export_dir": export_dir,
        "cpu_settings": cpu_settings.describe() if cpu_settings else None,
    }
    write_metrics(job.output_data_dir, metrics)
    return metrics

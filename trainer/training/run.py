"""One training process: input, model, epochs, evaluation, checkpoints, export, metrics."""
from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass

import tensorflow as tf

from trainer.models import hooks as user_hooks
from trainer.contract.channels import eval_channel_name
from trainer.contract.job import Job
from trainer.data import diagnose
from trainer.data.pipeline import EpochInput, InputSpec, pipe_reader, should_cache
from trainer.errors import JobError, PeerLost, Stopped
from trainer.models.optimizers import build_optimizer_state, learning_rate_for
from trainer.pricing import price_of
from trainer.report import write_metrics
from trainer.launch.supervise import lost_peer_reason
from trainer.training import equal_steps, switches
from trainer.training.stop import StopRequest
from trainer.training.watchdog import Watchdog

log = logging.getLogger(__name__)
AUC_THRESHOLDS = 1000
INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.DataLossError, tf.errors.UnknownError,
                tf.errors.OutOfRangeError)


class Throughput(tf.keras.callbacks.Callback):
    """Logs `step=N epoch=E loss=L samples/sec=S` when a multiple of `log_steps` steps is
    passed (Keras calls back once per steps_per_execution steps).

    The rate is this process's, times the number of training processes (they run in
    lockstep): the job's samples per second. It excludes the first call of each fit
    (graph tracing, the first window's parse) unless nothing else ran; an epoch's last,
    partial batch counts as a full one.
    """

    def __init__(self, batch_size: int, log_steps: int, processes: int = 1, prints: bool = True):
        super().__init__()
        self.samples_per_step = batch_size * processes
        self.log_steps = log_steps
        self.prints = prints  # only the chief prints progress lines
        self.timed_steps = 0
        self.timed_seconds = 0.0
        self.first_calls = [0, 0.0]  # steps and seconds of the calls left out

    def on_train_begin(self, logs=None):
        self.step = self._updates()
        self.window_start = None
        self.window_steps = 0

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch + 1

    def _updates(self) -> int:
        # Steps are counted as the optimizer's updates: Keras calls back once per
        # steps_per_execution steps, and a step where the ranks agreed to end the epoch
        # (equal_steps) makes none.
        return int(self.model.optimizer.iterations.numpy())

    def on_train_batch_begin(self, batch, logs=None):
        if self.window_start is None:
            self.call_start = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        step, now = self._updates(), time.perf_counter()
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
        if self.window_start is not None:
            step = self._updates()  # the pass may end inside a call, with no call back for its steps
            self.window_steps += step - self.step
            self.step = step
            self._close_window(time.perf_counter(), None)

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
        steps, seconds = (self.timed_steps, self.timed_seconds) if self.timed_seconds else self.first_calls
        return steps * self.samples_per_step / seconds if seconds else 0.0


class EpochThroughput(tf.keras.callbacks.Callback):
    """The job's samples per second over whole epochs, for modes that allow no batch-level
    callbacks (parameter servers): epoch time, tracing included."""

    def __init__(self, batch_size: int):
        super().__init__()
        self.batch_size = batch_size
        self.timed_steps = 0
        self.timed_seconds = 0.0

    def on_epoch_begin(self, epoch, logs=None):
        self.started = time.perf_counter()
        self.first_step = int(self.model.optimizer.iterations.numpy())

    def on_epoch_end(self, epoch, logs=None):
        self.timed_steps += int(self.model.optimizer.iterations.numpy()) - self.first_step
        self.timed_seconds += time.perf_counter() - self.started

    @property
    def samples_per_sec(self) -> float:
        return self.timed_steps * self.batch_size / self.timed_seconds if self.timed_seconds else 0.0


class EpochHeartbeat(tf.keras.callbacks.Callback):
    """Tells the watchdog an epoch made progress (modes without batch-level callbacks:
    their stall limit applies to a whole epoch)."""

    def __init__(self, watchdog):
        super().__init__()
        self.watchdog = watchdog

    def on_epoch_end(self, epoch, logs=None):
        self.watchdog.progress(int(self.model.optimizer.iterations.numpy()))


class Heartbeat(EpochHeartbeat):
    """Tells the watchdog each call into TensorFlow made progress."""

    def on_train_batch_end(self, batch, logs=None):
        self.watchdog.progress(int(self.model.optimizer.iterations.numpy()))


class Evaluator:
    """AUC and logloss over one pass of the evaluation data (Keras metrics).

    Each process evaluates its shard (or nothing); the metrics' states (confusion matrices,
    loss sums and counts) are then summed over the processes, so the result is that of the
    whole evaluation set however it was split (P6). Built once per run so its step
    function is traced once.
    """

    def __init__(self, model, all_reduce_sum, progress=lambda: None):
        self.model = model
        self.all_reduce_sum = all_reduce_sum
        self.progress = progress  # called after every batch (the watchdog's heartbeat)
        self.auc = tf.keras.metrics.AUC(num_thresholds=AUC_THRESHOLDS)
        self.logloss = tf.keras.metrics.BinaryCrossentropy()
        self.examples = tf.keras.metrics.Sum()
        self.metrics = (self.auc, self.logloss, self.examples)
        self._update = tf.function(self._update_step, reduce_retracing=True)

    def _update_step(self, features, labels):
        predictions = self.model(features, training=False)
        self.auc.update_state(labels, predictions)
        self.logloss.update_state(labels, predictions)
        self.examples.update_state(tf.cast(tf.shape(labels)[0], tf.float32))

    def __call__(self, dataset, channel_name: str) -> dict:
        for metric in self.metrics:
            metric.reset_state()
        for features, labels in dataset if dataset is not None else ():
            self._update(features, labels)
            self.progress()
        variables = [v for metric in self.metrics for v in metric.variables]
        for variable, total in zip(variables, self.all_reduce_sum([v.numpy() for v in variables])):
            variable.assign(total)
        if not self.examples.result():
            raise JobError(f"channel '{channel_name}' holds no records to evaluate on")
        return {"auc": float(self.auc.result()), "logloss": float(self.logloss.result()),
                "examples": int(self.examples.result())}


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


class _EndOfPassIsExpected(logging.Filter):
    """Keras warns "Your input ran out of data" when a pass ends before steps_per_epoch; a
    one-pass epoch ends exactly so."""

    def filter(self, record) -> bool:
        return not record.getMessage().startswith("Your input ran out of data")


logging.getLogger("tensorflow").addFilter(_EndOfPassIsExpected())


def fit_one_epoch(model, dataset, epoch: int, callbacks: list, steps: int | None, channel_name: str,
                  may_be_empty: bool = False) -> float:
    """One pass of Keras fit (`steps` None: until the dataset ends); returns the epoch's mean loss
    (None if no step ran and `may_be_empty`: a resumed pass with nothing left, a stopped one)."""
    if steps == 0 and may_be_empty:  # resumed after the epoch's last step
        return None
    before = int(model.optimizer.iterations.numpy())
    if steps is None:
        # Keras needs a step count with steps_per_execution > 1, and the size of the data is
        # unknown until it is read: the end of the pass ends the epoch.
        steps = equal_steps.UNBOUNDED_STEPS
    try:
        fit = model.fit(dataset, initial_epoch=epoch, epochs=epoch + 1, steps_per_epoch=steps,
                        verbose=0, callbacks=callbacks)
        history = fit.history["loss"]
    except ValueError as err:
        if "Empty logs" not in str(err):  # Keras' words for a pass whose first call did not complete
            raise
        history = []  # a pass shorter than one call of steps_per_execution steps (or empty: below)
    if int(model.optimizer.iterations.numpy()) == before:
        if may_be_empty:
            return None
        if not history:
            raise JobError(f"channel '{channel_name}' holds no records to train on")
        raise JobError(f"channel '{channel_name}': no training step ran in epoch {epoch + 1}: "
                       "a process's shard of the training data is empty (see P5 in docs/pitfalls.md); "
                       "give every process data, or use fewer processes")
    return float(history[-1]) if history else float(model.get_metrics_result()["loss"])


def export_saved_model(model, model_dir: str, version: int, io_device: str | None = None) -> str:
    """SavedModel in TF Serving's layout: <model_dir>/<version>/saved_model.pb."""
    path = os.path.join(model_dir, str(version))
    if os.path.exists(path):
        shutil.rmtree(path)
    model.save(path, include_optimizer=False, save_format="tf",
               options=tf.saved_model.SaveOptions(experimental_io_device=io_device))
    return path


@dataclass
class Inputs:
    """What this process reads, as specs (for error diagnosis) and epoch datasets."""

    train_spec: InputSpec
    train: EpochInput
    eval_channel: str | None  # the job's evaluation channel
    eval_spec: InputSpec | None  # this process's part of it (None: evaluates nothing itself)
    eval: EpochInput | None

    @property
    def specs(self) -> list[InputSpec]:
        return [spec for spec in (self.train_spec, self.eval_spec) if spec]

    @staticmethod
    def training(job: Job, plan, process, hooks, batch_size: int, list_at_runtime: bool = False) -> EpochInput:
        """The training input of `process` (this one, or a parameter-server worker)."""
        hp = job.hyperparameters
        spec = InputSpec.for_channels([job.channels[c] for c in process.channels], hp.data_format, process.shard)
        if list_at_runtime:
            spec = dataclasses.replace(spec, files=(), list_at_runtime=True)
        return EpochInput(spec, hooks.parse_fn(spec.data_format), batch_size, hp.shuffle_buffer,
                          hp.seed + (process.rank or 0),
                          should_cache(hp.cache_input, spec, plan.processes_per_host), hp.pipe_wait_sec,
                          pipe_reader(hp.pipe_reader))

    @staticmethod
    def for_process(job: Job, plan, process, hooks, batch_size: int) -> "Inputs":
        hp = job.hyperparameters
        train = Inputs.training(job, plan, process, hooks, batch_size)
        train_spec = train.spec
        eval_channel = eval_channel_name(job)
        if eval_channel is None or process.eval_shard is None:
            return Inputs(train_spec, train, eval_channel, None, None)
        eval_spec = InputSpec.for_channels([job.channels[eval_channel]], hp.data_format, process.eval_shard)
        evaluation = EpochInput(eval_spec, hooks.parse_fn(eval_spec.data_format), batch_size,
                                cache=should_cache(hp.cache_input, eval_spec, plan.processes_per_host),
                                pipe_wait_sec=hp.pipe_wait_sec, reader=pipe_reader(hp.pipe_reader))
        return Inputs(train_spec, train, eval_channel, eval_spec, evaluation)

    def describe(self) -> str:
        mode = self.train_spec.channels[0].input_mode
        if self.train_spec.is_pipe:
            mode += f" read by {self.train.reader}"
        text = (f"training channel(s) '{self.train_spec.name}' ({mode}, "
                f"{self.train_spec.data_format}, shard {self.train_spec.shard_count}/{self.train_spec.shard_index}, "
                f"cache={self.train.cache})")
        return text + (f"; evaluation channel '{self.eval_channel}'" if self.eval_channel
                       else "; no evaluation channel")


def restore_latest(checkpoint, manager, options) -> None:
    if manager.latest_checkpoint:
        checkpoint.restore(manager.latest_checkpoint, options=options).expect_partial()
        into = int(checkpoint.epoch_step)
        log.info("resumed from %s: %d epochs and %d steps done%s", manager.latest_checkpoint, int(checkpoint.epoch),
                 int(checkpoint.optimizer.iterations.numpy()),
                 f" ({into} steps into epoch {int(checkpoint.epoch) + 1})" if into else "")


def train(job: Job, plan, process, runtime, cpu_settings=None) -> dict:
    """Train in this process as `process` of `plan`; returns the metrics (the chief writes them)."""
    hp = job.hyperparameters
    watchdog = Watchdog(process.name, job.output_dir, hp.stall_timeout_sec).start()
    try:
        return _train(job, plan, process, runtime, cpu_settings, watchdog)
    except tf.errors.UnavailableError as err:  # TensorFlow's word for a peer that is gone
        raise PeerLost(lost_peer_reason(plan, process.name, getattr(err, "message", str(err)))) from err
    finally:
        watchdog.stop()


def _train(job: Job, plan, process, runtime, cpu_settings, watchdog) -> dict:
    hp = job.hyperparameters
    runtime.start()  # before TensorFlow runs anything: devices and collectives
    stop = runtime.stop_request = StopRequest(process.name, job.output_dir,
                                                       job.hyperparameters.stop_grace_sec).install()  # holds a tf.Variable
    hooks = user_hooks.resolve(job, learning_rate_for(plan))
    inputs = Inputs.for_process(job, plan, process, hooks, runtime.batch_size)
    # Parameter-server workers build their input where they run, from their own plan entry.
    runtime.input_for = lambda worker: Inputs.training(job, plan, worker, hooks, runtime.batch_size,
                                                       list_at_runtime=True)
    log.info("%s as %s rank %s: model %s; %s", plan.mode, process.role, process.rank, hooks.source,
             inputs.describe())

    tf.keras.utils.set_random_seed(hp.seed)
    switches.apply_precision(hp, on_cpu=not job.num_gpus)
    with runtime.scope():
        model = hooks.model_fn()
        optimizer = runtime.wrap_optimizer(hooks.optimizer_fn())
        model.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy(),
                      steps_per_execution=plan.steps_per_execution, **switches.compile_options(hp))
        build_optimizer_state(optimizer, model.trainable_variables)

    epoch_counter = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
    epoch_step = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_step")  # >0: stopped mid-epoch
    # The compiled optimizer: under mixed_float16 the loss-scale wrapper, whose scale is state too.
    checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer, epoch=epoch_counter,
                                     epoch_step=epoch_step)
    manager = tf.train.CheckpointManager(checkpoint, job.checkpoint_dir, max_to_keep=hp.keep_checkpoints)
    checkpoint_options = tf.train.CheckpointOptions(experimental_io_device=runtime.io_device)
    if runtime.writes_outputs:  # the chief restores; the others get its state (P8)
        restore_latest(checkpoint, manager, checkpoint_options)
    start_epoch = runtime.broadcast_from_chief(int(epoch_counter.numpy()))
    resume_step = runtime.broadcast_from_chief(int(epoch_step.numpy()))
    epoch_counter.assign(start_epoch)
    runtime.sync_initial_state(model, optimizer)
    runtime.prepare(model, optimizer)

    throughput = (Throughput(runtime.batch_size, hp.log_steps, plan.world_size, runtime.writes_outputs)
                  if runtime.batch_callbacks else EpochThroughput(runtime.batch_size))
    heartbeat = Heartbeat(watchdog) if runtime.batch_callbacks else EpochHeartbeat(watchdog)
    callbacks = [throughput, heartbeat] + runtime.callbacks() + runtime.stop_callbacks()
    if runtime.writes_outputs:
        callbacks += switches.profiler_callbacks(hp, job.output_data_dir)
    evaluator = Evaluator(model, runtime.all_reduce_sum, watchdog.progress)

    def evaluate(epoch_number: int, pass_index: int) -> dict:
        log.info("epoch=%d evaluating on channel '%s'", epoch_number, inputs.eval_channel)
        with input_errors_explained(inputs.specs, hooks, hp), \
                watchdog.phase(f"evaluating after epoch {epoch_number}", first_limit_sec=fifo_wait(inputs.eval_spec)):
            dataset = inputs.eval.dataset(pass_index) if inputs.eval else None
            result = evaluator(dataset, inputs.eval_channel)
        return {"eval_auc": result["auc"], "eval_logloss": result["logloss"]}

    def fifo_wait(spec) -> float:  # a Pipe-mode pass may first wait for its FIFO (and fails by itself)
        return hp.pipe_wait_sec + hp.stall_timeout_sec if spec is not None and spec.is_pipe else 0.0

    def save_checkpoint(epoch_number: int, where: str = "") -> None:
        if runtime.writes_outputs:
            log.info("epoch=%d saving checkpoint%s to %s", epoch_number, where, job.checkpoint_dir)
            with watchdog.phase("saving a checkpoint", hp.save_timeout_sec):
                manager.save(checkpoint_number=int(optimizer.iterations.numpy()), options=checkpoint_options)

    def stopped(where: str) -> Stopped:
        runtime.broadcast_from_chief(1)  # every rank stays until the chief has saved
        saved = (f"checkpoint saved in {job.checkpoint_dir}: a job started again with it resumes there"
                 if runtime.writes_outputs else "the chief saved the checkpoint")
        return Stopped(f"{process.name}: stopped by SIGTERM {where}; {saved}", reported=runtime.writes_outputs)

    price = price_of(job.instance_type, len(job.hosts), hp.price_per_hour)
    if runtime.writes_outputs:
        log.info("price: %s for %d x %s (%s)", f"${price.per_hour:.3f}/hour" if price.per_hour else "unknown",
                 len(job.hosts), job.instance_type, price.source)

    def per_dollar(samples_per_sec: float) -> str:
        value = price.samples_per_dollar(samples_per_sec)
        return f" samples/$={value:.0f}" if value else ""

    history = []
    train_seconds = 0.0
    for epoch in range(start_epoch, hp.num_epochs):
        pass_index = epoch - start_epoch  # Pipe mode: FIFOs count from 0 in every run
        skip = resume_step if epoch == start_epoch else 0  # batches of this epoch trained before a stop
        if skip:
            log.info("epoch=%d resuming after its first %d steps", epoch + 1, skip)
        started, steps_before = time.perf_counter(), int(optimizer.iterations.numpy())
        with input_errors_explained(inputs.specs, hooks, hp), \
                watchdog.phase(f"training epoch {epoch + 1}", first_limit_sec=fifo_wait(inputs.train_spec)):
            dataset = inputs.train.dataset(pass_index, epoch, skip)
            epoch_steps = runtime.steps_per_epoch(dataset, skip)
            loss = fit_one_epoch(model, runtime.training_dataset(dataset), epoch, callbacks,
                                 None if epoch_steps is None else max(0, epoch_steps - skip),
                                 inputs.train_spec.name,
                                 may_be_empty=bool(skip) or stop.requested)
        train_seconds += time.perf_counter() - started
        if stop.interrupted_pass:
            epoch_step.assign(skip + int(optimizer.iterations.numpy()) - steps_before)
            where = f"{int(epoch_step.numpy())} steps into epoch {epoch + 1}"
            save_checkpoint(epoch + 1, f" ({where})")
            raise stopped(f"at step {int(optimizer.iterations.numpy())} ({where})")
        epoch_step.assign(0)
        record = {"epoch": epoch + 1, "train_loss": loss}
        if hooks.bad_records is not None:  # skip_bad_records: say how many were dropped, not only count
            record["bad_records_skipped"] = int(hooks.bad_records.skipped.numpy())
            if record["bad_records_skipped"]:
                log.warning("epoch=%d skip_bad_records: %d bad records skipped so far (malformed lines, "
                            "ids outside [0, feature_size=%d))", epoch + 1, record["bad_records_skipped"],
                            hp.feature_size)
        if inputs.eval_channel:
            record.update(evaluate(epoch + 1, pass_index))
        history.append(record)
        log.info("epoch=%d steps=%d train_loss=%s%s samples/sec=%.1f%s", epoch + 1,
                 int(optimizer.iterations.numpy()), "n/a" if loss is None else f"{loss:.5f}",
                 f" eval_auc={record['eval_auc']:.5f} eval_logloss={record['eval_logloss']:.5f}"
                 if inputs.eval_channel else "", throughput.samples_per_sec, per_dollar(throughput.samples_per_sec))
        epoch_counter.assign(epoch + 1)
        save_checkpoint(epoch + 1)
        # The chief decides, so that every rank stops at this epoch's end or none does.
        if runtime.broadcast_from_chief(int(stop.requested)) and epoch + 1 < hp.num_epochs:
            raise stopped(f"at the end of epoch {epoch + 1} (step {int(optimizer.iterations.numpy())})")

    if inputs.eval_channel and not history:  # resumed after the last epoch: evaluate what was restored
        history.append({"epoch": start_epoch, **evaluate(start_epoch, 0)})

    last = history[-1] if history else {}
    samples_per_dollar = price.samples_per_dollar(throughput.samples_per_sec)
    metrics = {
        "eval_auc": last.get("eval_auc"),
        "eval_logloss": last.get("eval_logloss"),
        "train_loss": last.get("train_loss"),
        "train_samples_per_sec": round(throughput.samples_per_sec, 1),
        "samples_per_dollar": samples_per_dollar and round(samples_per_dollar),
        "price_per_hour": price.per_hour,
        "price_source": price.source,
        "train_seconds": round(train_seconds, 3),
        "epochs": int(epoch_counter.numpy()),
        "steps": int(optimizer.iterations.numpy()),
        "resumed_from_epoch": start_epoch,
        "bad_records_skipped": None if hooks.bad_records is None else int(hooks.bad_records.skipped.numpy()),
        "history": history,
        "model": hooks.source,
        "distribution": plan.mode,
        "world_size": plan.world_size,
        "global_batch_size": plan.global_batch_size,
        "cpu_settings": cpu_settings.describe() if cpu_settings else None,
    }
    if runtime.writes_outputs:
        with watchdog.phase("exporting the model", hp.save_timeout_sec):
            metrics["export_dir"] = export_saved_model(model, job.model_dir, hp.model_version, runtime.io_device)
        log.info("exported SavedModel to %s", metrics["export_dir"])
        write_metrics(job.output_data_dir, metrics)
    elif runtime.export_is_collective:
        with tempfile.TemporaryDirectory(prefix="trainer-export-") as scratch:
            export_saved_model(model, scratch, hp.model_version)
    return metrics

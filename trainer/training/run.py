"""One training process: a TrainingRun builds the input, model and training state once,
then runs the epochs (evaluating, checkpointing, stopping cleanly), exports the model and
writes the metrics."""
from __future__ import annotations

import logging
import os
import tempfile
import time

import tensorflow as tf

from trainer.contract.job import Job
from trainer.errors import PeerLost, Stopped
from trainer.logs import EVERY_RANK_LOGGER
from trainer.supervision.supervise import lost_peer_reason
from trainer.models import hooks as user_hooks
from trainer.models.optimizers import build_optimizer_state, learning_rate_for
from trainer.plan.start import Start
from trainer.pricing import price_of_job
from trainer.report import write_metrics
from trainer.training import switches, tensorboard
from trainer.training.callbacks import progress_callbacks
from trainer.training.evaluation import Evaluator
from trainer.training.inputs import Inputs, input_errors_explained, with_field_size_of
from trainer.training.keras_pass import END_OF_PASS_FILTER
from trainer.training.saving import Checkpoints, export_saved_model, weights_fingerprint
from trainer.training.stop import StopRequest
from trainer.training.watchdog import Watchdog

log = logging.getLogger(__name__)
START_LOG = logging.getLogger(EVERY_RANK_LOGGER)  # a warm start, compared across ranks


def train(job: Job, plan, process, runtime, cpu_settings=None) -> dict:
    """Train in this process as `process` of `plan`; returns the metrics (the chief writes them)."""
    watchdog = Watchdog(process.name, job.output_dir, job.hyperparameters.stall_timeout_sec).start()
    tf_log = logging.getLogger("tensorflow")
    tf_log.addFilter(END_OF_PASS_FILTER)
    try:
        return TrainingRun(job, plan, process, runtime, watchdog, cpu_settings).run()
    except tf.errors.UnavailableError as err:  # TensorFlow's word for a peer that is gone
        raise PeerLost(lost_peer_reason(plan, process.name, getattr(err, "message", str(err)))) from err
    finally:
        tf_log.removeFilter(END_OF_PASS_FILTER)
        watchdog.stop()


class TrainingRun:
    """`process` of `plan` training here: everything built once, then `run()`."""

    def __init__(self, job: Job, plan, process, runtime, watchdog, cpu_settings=None):
        train_spec = Inputs.training_spec(job, plan, process)
        job = with_field_size_of(job, train_spec)  # a table's columns make the model's fields
        self.job, self.plan, self.process, self.runtime, self.watchdog = job, plan, process, runtime, watchdog
        self.cpu_settings = cpu_settings  # reported in the metrics
        self.hp = hp = job.hyperparameters
        runtime.start()  # before TensorFlow runs anything: devices and collectives
        self.stop = runtime.stop_request = StopRequest(process.name, job.output_dir, hp.stop_grace_sec).install()
        self.hooks = user_hooks.load_hooks(job, learning_rate_for(plan))
        self.inputs = Inputs.for_process(job, plan, process, self.hooks, runtime.batch_size, train_spec)
        # Parameter-server workers build their input where they run, from their own plan entry.
        runtime.input_for = lambda worker: Inputs.training(job, plan, worker, self.hooks, runtime.batch_size,
                                                           on_ps_worker=True)
        self.model, self.optimizer = self._build_model()
        self.saved = Checkpoints(self.model, job.checkpoint_dir, hp.keep_checkpoints, runtime.io_device,
                                 self.hooks.written_by(hp, job.job_name))
        self.start_epoch, self.resume_step = self._restore()
        runtime.prepare(self.model, self.optimizer)
        log.info("%s as %s rank %s: model %s; %s", plan.mode, process.role, process.rank, self.hooks.source,
                 self.inputs.describe(runtime.training_input(self.inputs.train)))
        self.throughput, heartbeat = progress_callbacks(runtime, plan, hp.log_steps, watchdog)
        self.tensorboard = self._tensorboard_runs()
        # The runtime's first: what they do at a call's end (an average) is timed in the call.
        self.callbacks = runtime.callbacks() + [self.throughput, heartbeat] + runtime.stop_callbacks()
        self.callbacks.append(tensorboard.StepScalars(
            self.tensorboard, runtime.batch_size, plan.world_size if runtime.steps_in_lockstep else 1, process.rank,
            hp.log_steps))
        if runtime.writes_outputs and job.tensorboard_dir:
            self.callbacks += switches.profiler_callbacks(hp, os.path.join(job.tensorboard_dir, tensorboard.PROFILE_RUN))
        self.evaluator = Evaluator(self.model, runtime.all_reduce_sum, watchdog.progress)
        self.price = price_of_job(job)
        self.history: list[dict] = []
        self.train_seconds = 0.0

    def _tensorboard_runs(self) -> tensorboard.Runs:
        """The chief writes the model's curves; with several training processes in step
        (Horovod, multi-worker mirrored) each also writes its own rate."""
        several = self.runtime.steps_in_lockstep and self.plan.world_size > 1
        runs = tensorboard.planned_runs(self.process.rank, self.runtime.writes_outputs, several)
        return tensorboard.Runs(self.job.tensorboard_dir, runs if self.job.tensorboard_dir else ())

    def _build_model(self):
        hp, runtime = self.hp, self.runtime
        tf.keras.utils.set_random_seed(hp.seed)
        switches.apply_precision(hp, on_cpu=not self.job.num_gpus)
        with runtime.scope():
            model = self.hooks.model_fn()
            optimizer = runtime.wrap_optimizer(self.hooks.optimizer_fn())
            model.compile(optimizer=optimizer, loss=tf.keras.losses.BinaryCrossentropy(),
                          steps_per_execution=self.plan.steps_per_execution, **switches.compile_options(hp))
            build_optimizer_state(optimizer, model.trainable_variables)
        return model, optimizer

    def _restore(self) -> tuple[int, int]:
        """(epochs done, steps of the next epoch done): the chief restores; the others get its state (P8)."""
        runtime, job = self.runtime, self.job
        self.started_from = None
        if runtime.writes_outputs:
            self.started_from = self.saved.begin(self.plan.start or Start("fresh", "no plan of its start"),
                                                 job.channels.get(self.hp.model_channel))
        start_epoch = runtime.broadcast_from_chief(int(self.saved.epoch.numpy()))
        resume_step = runtime.broadcast_from_chief(int(self.saved.epoch_step.numpy()))
        runtime.resume_position = tuple(int(steps) for steps in self.saved.pass_position.numpy())
        self.saved.epoch.assign(start_epoch)
        runtime.sync_initial_state(self.model, self.optimizer)
        warm = self.started_from is not None and not self.started_from.resume
        if runtime.broadcast_from_chief(int(warm)):
            START_LOG.info("%s starts from weights %s", self.process.name, weights_fingerprint(self.model))
        return start_epoch, resume_step

    @property
    def step(self) -> int:
        return int(self.optimizer.iterations.numpy())

    def run(self) -> dict:
        if self.runtime.writes_outputs:
            price = self.price
            log.info("price: %s for %d instance(s) (%s)", f"${price.per_hour:.3f}/hour" if price.per_hour else "unknown",
                     price.instances, price.source if self.job.instance_groups else f"{self.job.instance_type}, {price.source}")
        for epoch in range(self.start_epoch, self.hp.num_epochs):
            self._epoch(epoch)
        if self.inputs.eval_channel and not self.history:  # resumed after the last epoch: evaluate what was restored
            self.history.append({"epoch": self.start_epoch, **self._evaluate(self.start_epoch, 0)})
        metrics = self._metrics()
        self.tensorboard.close()
        self._export(metrics)
        return metrics

    def _epoch(self, epoch: int) -> None:
        """Train epoch `epoch` (from 0), evaluate, save; raises Stopped after a SIGTERM."""
        hp, runtime, inputs = self.hp, self.runtime, self.inputs
        pass_index = epoch - self.start_epoch  # Pipe mode: FIFOs count from 0 in every run
        skip = self.resume_step if epoch == self.start_epoch else 0  # batches of this epoch trained before a stop
        if skip:
            log.info("epoch=%d resuming after its first %d steps", epoch + 1, skip)
        started, steps_before = time.perf_counter(), self.step
        with input_errors_explained(inputs.specs, self.hooks, hp), \
                self.watchdog.phase(f"training epoch {epoch + 1}", first_limit_sec=self._fifo_wait(inputs.train_spec)):
            loss = runtime.train_pass(self.model, inputs.train, epoch, pass_index, skip, self.callbacks,
                                      inputs.train_spec.name, may_be_empty=bool(skip) or self.stop.requested)
        self.train_seconds += time.perf_counter() - started
        if self.stop.interrupted_pass:
            self.saved.epoch_step.assign(skip + self.step - steps_before)
            self.saved.pass_position.assign(runtime.pass_position())
            where = f"{int(self.saved.epoch_step.numpy())} steps into epoch {epoch + 1}"
            self._save_checkpoint(epoch + 1, f" ({where})")
            raise self._stopped(f"at step {self.step} ({where})")
        self.saved.epoch_step.assign(0)
        self.saved.pass_position.assign([])
        record = self._record(epoch, loss, pass_index)
        self.history.append(record)
        self.tensorboard.write(tensorboard.EPOCH_RUN, epoch + 1, {
            name: record.get(name) for name in ("eval_auc", "eval_logloss")})
        self.tensorboard.flush()
        samples_per_sec = self.throughput.samples_per_sec
        per_dollar = self.price.samples_per_dollar(samples_per_sec)
        log.info("epoch=%d steps=%d train_loss=%s%s samples/sec=%.1f%s", epoch + 1, self.step,
                 "n/a" if loss is None else f"{loss:.5f}",
                 f" eval_auc={record['eval_auc']:.5f} eval_logloss={record['eval_logloss']:.5f}"
                 if inputs.eval_channel else "", samples_per_sec, f" samples/$={per_dollar:.0f}" if per_dollar else "")
        self.saved.epoch.assign(epoch + 1)
        self._save_checkpoint(epoch + 1)
        # The chief decides, so that every rank stops at this epoch's end or none does.
        if runtime.broadcast_from_chief(int(self.stop.requested)) and epoch + 1 < hp.num_epochs:
            raise self._stopped(f"at the end of epoch {epoch + 1} (step {self.step})")

    def _record(self, epoch: int, loss, pass_index: int) -> dict:
        """The epoch's line of the history: its loss, the bad records skipped, its evaluation."""
        record = {"epoch": epoch + 1, "train_loss": loss}
        bad_records = self.hooks.bad_records
        if bad_records is not None:  # skip_bad_records: say how many were dropped, not only count
            record["bad_records_skipped"] = int(bad_records.skipped.numpy())
            if record["bad_records_skipped"]:
                log.warning("epoch=%d skip_bad_records: %d bad records skipped so far (malformed lines, "
                            "ids outside [0, feature_size=%d))", epoch + 1, record["bad_records_skipped"],
                            self.hp.feature_size)
        if self.inputs.eval_channel:
            record.update(self._evaluate(epoch + 1, pass_index))
        return record

    def _fifo_wait(self, spec) -> float:
        """A Pipe-mode pass may first wait for its FIFO (and fails by itself)."""
        return self.hp.pipe_wait_sec + self.hp.stall_timeout_sec if spec is not None and spec.is_pipe else 0.0

    def _evaluate(self, epoch_number: int, pass_index: int) -> dict:
        inputs = self.inputs
        log.info("epoch=%d evaluating on channel '%s'", epoch_number, inputs.eval_channel)
        with input_errors_explained(inputs.specs, self.hooks, self.hp), \
                self.watchdog.phase(f"evaluating after epoch {epoch_number}",
                                    first_limit_sec=self._fifo_wait(inputs.eval_spec)):
            dataset = inputs.eval.dataset(pass_index) if inputs.eval else None
            result = self.evaluator(dataset, inputs.eval_channel)
        return {"eval_auc": result["auc"], "eval_logloss": result["logloss"]}

    def _save_checkpoint(self, epoch_number: int, where: str = "") -> None:
        if self.runtime.writes_outputs:
            log.info("epoch=%d saving checkpoint%s to %s", epoch_number, where, self.job.checkpoint_dir)
            with self.watchdog.phase("saving a checkpoint", self.hp.save_timeout_sec):
                self.saved.save(self.step)

    def _stopped(self, where: str) -> Stopped:
        runtime = self.runtime
        runtime.broadcast_from_chief(1)  # every rank stays until the chief has saved
        saved = (f"checkpoint saved in {self.job.checkpoint_dir}: a job started again with it resumes there"
                 if runtime.writes_outputs else "the chief saved the checkpoint")
        return Stopped(f"{self.process.name}: stopped by SIGTERM {where}; {saved}", reported=runtime.writes_outputs)

    def _metrics(self) -> dict:
        last = self.history[-1] if self.history else {}
        samples_per_sec = self.throughput.samples_per_sec
        samples_per_dollar = self.price.samples_per_dollar(samples_per_sec)
        bad_records = self.hooks.bad_records
        return {
            "eval_auc": last.get("eval_auc"),
            "eval_logloss": last.get("eval_logloss"),
            "train_loss": last.get("train_loss"),
            "train_samples_per_sec": round(samples_per_sec, 1),
            "samples_per_dollar": samples_per_dollar and round(samples_per_dollar),
            "price_per_hour": self.price.per_hour,
            "price_source": self.price.source,
            "train_seconds": round(self.train_seconds, 3),
            "epochs": int(self.saved.epoch.numpy()),
            "steps": self.step,
            "resumed_from_epoch": self.start_epoch,
            "started_from": self.started_from and {"how": "resume" if self.started_from.resume else "warm_start",
                                                   "kind": self.started_from.kind, "path": self.started_from.path,
                                                   "job": self.started_from.job},
            "bad_records_skipped": None if bad_records is None else int(bad_records.skipped.numpy()),
            "history": self.history,
            "model": self.hooks.source,
            "distribution": self.plan.mode,
            "world_size": self.plan.world_size,
            "global_batch_size": self.plan.global_batch_size,
            "cpu_settings": self.cpu_settings.describe(self.job.tf_line.openmp) if self.cpu_settings else None,
        }

    def _raw_signatures(self) -> dict | None:
        """A model trained on raw columns (CSV, TSV, Parquet) is served the same columns."""
        spec = self.inputs.train_spec
        if spec.columns is None:
            return None
        from trainer.data.raw_features import serving_signatures

        return serving_signatures(self.model, spec.columns, spec.delimiter, self.hp.feature_size)

    def _export(self, metrics: dict) -> None:
        """The chief exports the SavedModel and writes the metrics; where exporting is a
        collective, the others join it, exporting to a folder thrown away."""
        runtime, hp = self.runtime, self.hp
        if runtime.writes_outputs:
            with self.watchdog.phase("exporting the model", hp.save_timeout_sec):
                metrics["export_dir"] = export_saved_model(
                    self.model, self.job.model_dir, hp.model_version, runtime.io_device, self._raw_signatures(),
                    record={**self.saved.written_by, "epoch": metrics["epochs"], "step": self.step})
            log.info("exported SavedModel to %s (weights %s)", metrics["export_dir"], weights_fingerprint(self.model))
            write_metrics(self.job.output_data_dir, metrics)
        elif runtime.export_is_collective:
            with tempfile.TemporaryDirectory(prefix="trainer-export-") as scratch:
                export_saved_model(self.model, scratch, hp.model_version, signatures=self._raw_signatures())

"""Helpers for a user's own training script in this container (`from trainer import kit`).

A script that uses none of them still runs; each one gives what the container knows:

    kit.rank(), kit.world_size(), kit.is_chief()
    kit.dataset(batch_size, epoch=0)   this rank's tf.data dataset of one pass: its own
                                       channel (Pipe mode: its own FIFO, the pass's
                                       <channel>_<epoch>), its exactly-once shard, parsed a
                                       window at a time (the DeepFM record layout, CSV, TSV
                                       and Parquet columns as the built-in model maps them,
                                       or `parse_fn(serialized) -> (features, label)`)
                                       (with a data group: read, parsed and batched on the
                                       data hosts, through their tf.data service)
    kit.rows(batch_size, epoch=0, channel=None)  this rank's share of a channel's rows (or a
                                       named channel's rows) as batches of named columns, any
                                       format: CSV, TSV and Parquet columns by name (numbers
                                       as float32, NaN where missing; categories as strings)
    kit.from_data_service(dataset)     `dataset` run on a heterogeneous cluster's data hosts and
                                       read from their tf.data service (distributed_epoch); the
                                       dataset itself where the job has no data group
    kit.learning_rate(base)            base times the job's synchronous replicas
    kit.callbacks(batch_size, model=None)  logs `samples/sec=` and `samples/$=` (the
                                       estimator's metric_definitions), checkpoints to the job's
                                       checkpoint folder (chief; /opt/ml/checkpoints or
                                       checkpointconfig.json's LocalPath), resumes from it,
                                       and on SIGTERM stops at
                                       the next step and saves
    kit.tensorboard(batch_size)        a callback writing TensorBoard scalars where SageMaker
                                       uploads them live (loss, samples/sec, learning rate
                                       by step; every epoch's logs by epoch: the chief; each
                                       rank's samples/sec, when there are several)
    kit.export(model)                  a SavedModel in TF Serving's layout, SM_MODEL_DIR/1
                                       (chief only; returns its path)

Everything is read from the job's files and the environment the container gives each
process (trainer.script.process); nothing here starts processes or sets up distribution.
"""
from __future__ import annotations

import functools
import logging
import os
import time

from trainer.contract.job import base_dir_from_env, read_job

log = logging.getLogger("trainer.kit")


@functools.lru_cache(maxsize=1)
def _job_and_plan():
    from trainer.planner.planner import make_plan

    job = read_job(base_dir_from_env())
    return job, make_plan(job)


def rank() -> int:
    return int(os.environ.get("TRAINER_RANK", "0"))


def world_size() -> int:
    return int(os.environ.get("TRAINER_WORLD_SIZE", "1"))


def is_chief() -> bool:
    return rank() <= 0


def _process():
    job, plan = _job_and_plan()
    return job, plan, next(p for p in plan.processes if p.rank == max(rank(), 0) and p.role != "ps")


def _input(batch_size: int, epoch: int, parse, shuffle_buffer: int, seed: int | None, channel: str | None,
           strings: bool = False):
    """One pass of an EpochInput over this rank's training channels and shard (or, `channel`
    named, that channel whole), each window parsed by `parse(spec)`; `strings`: Parquet's
    categorical values as read, not hashed."""
    import dataclasses

    from trainer.data.pipeline import EpochInput, InputSpec

    job, plan, process = _process()
    if channel is not None:
        if channel not in job.channels:
            raise ValueError(f"kit: the job has no channel '{channel}'; it has {', '.join(sorted(job.channels))}")
        process = dataclasses.replace(process, channels=(channel,), shard=(1, 0))
    if not process.channels:
        raise ValueError("kit.dataset: the job has no channel named training (or training-<k>); "
                         "read your channels from SM_CHANNEL_* yourself")
    hp = job.hyperparameters
    # A data group reads File-mode channels (a FIFO streams to its own host's reader only).
    on_pipe = job.channels[process.channels[0]].is_pipe
    service = plan.data_service if plan.data_service and plan.data_service.serves and not on_pipe else None
    spec = InputSpec.for_process(job, process, on_data_hosts=service is not None)
    if strings:
        spec = dataclasses.replace(spec, feature_size=None)
    source = EpochInput(spec, parse(spec), batch_size, shuffle_buffer, seed, pipe_wait_sec=hp.pipe_wait_sec,
                        service=service)
    return source.dataset(epoch)


def dataset(batch_size: int, epoch: int = 0, parse_fn=None, shuffle_buffer: int = 0, seed: int | None = None):
    """One pass over this rank's own data (File mode: repeat it, or call once per epoch;
    Pipe mode: call once per epoch, each reads the epoch's FIFO), as (features, label) batches:
    `parse_fn`'s, or the built-in model's (TFRecord, libsvm, and CSV, TSV and Parquet columns
    mapped as the job's hyperparameters say)."""
    hp = _job_and_plan()[0].hyperparameters
    return _input(batch_size, epoch, lambda spec: parse_fn or spec.parser(hp.field_size, hp.feature_size),
                  shuffle_buffer, seed, None)


def rows(batch_size: int, epoch: int = 0, channel: str | None = None, shuffle_buffer: int = 0,
         seed: int | None = None):
    """One pass over this rank's rows (or, `channel` named, that channel's), as batches of
    named columns, whatever the format: a CSV, TSV or Parquet channel's label, numeric
    (float32, NaN where missing) and categorical (strings, "" where missing) columns, by their
    names (a header's, a schema's, else Criteo's or column_<position>); a TFRecord or libsvm
    channel's ids, values and label."""
    from trainer.data import raw_features

    hp = _job_and_plan()[0].hyperparameters

    def named(spec):
        if spec.columns is None:
            parse = spec.parser(hp.field_size, hp.feature_size)
            return lambda window: (lambda features, label: {**features, "label": label})(*parse(window))
        columns = (lambda window: window) if spec.is_parquet else (
            lambda lines: raw_features.decode_table(lines, spec.columns, spec.delimiter))
        return lambda window: raw_features.named_columns(columns(window), spec.columns)

    return _input(batch_size, epoch, named, shuffle_buffer, seed, channel, strings=True)


def from_data_service(dataset):
    """`dataset` (a tf.data pipeline of the script's own) run on the data hosts of a
    heterogeneous cluster and read from their tf.data service, as
    `dataset.apply(tf.data.experimental.service.distribute(...))` does in AWS's examples:
    distributed_epoch, so each element is produced once an epoch, by whichever worker is free
    (split by the dataset's source: list the files, rather than read one file, so every worker
    has some). Each call (each pass over the result) is a job of its own on the service.
    Without a data group (no TRAINER_DATA_SERVICE) it is `dataset` itself, so one script
    serves both jobs."""
    from trainer.plan.types import DATA_SERVICE_ENV

    address = os.environ.get(DATA_SERVICE_ENV)
    if not address:
        return dataset
    import tensorflow as tf

    service = tf.data.experimental.service
    # Uncompressed: decompressing would put work back on the training host's CPUs.
    return dataset.apply(service.distribute(processing_mode=service.ShardingPolicy.DYNAMIC, service=address,
                                            compression=None))


def learning_rate(base: float) -> float:
    """`base` times the job's synchronous replicas (the rule for a batch size per replica)."""
    return base * float(os.environ.get("TRAINER_LEARNING_RATE_SCALE", "1"))


def callbacks(batch_size: int, model=None, log_steps: int = 100) -> list:
    """Throughput and cost lines, checkpoints of `model` (chief) and a clean stop on SIGTERM."""
    import tensorflow as tf

    from trainer.pricing import price_of_job
    from trainer.training.stop import StopRequest

    job, plan, process = _process()
    price = price_of_job(job)
    processes = plan.world_size
    stop = StopRequest(process.name, job.output_dir, job.hyperparameters.stop_grace_sec).install()

    class Progress(tf.keras.callbacks.Callback):  # made here: importing kit does not import TensorFlow
        def on_train_begin(self, logs=None):
            self.start, self.steps = time.perf_counter(), 0

        def on_train_batch_end(self, batch, logs=None):
            self.steps += 1
            if self.steps % log_steps == 0 and is_chief():
                seconds = time.perf_counter() - self.start
                rate = self.steps * batch_size * processes / seconds
                per_dollar = price.samples_per_dollar(rate)
                print(f"step={self.steps} loss={(logs or {}).get('loss', float('nan')):.5f} samples/sec={rate:.1f}"
                      + (f" samples/$={per_dollar:.0f}" if per_dollar else ""), flush=True)
            if stop.requested:
                self.model.stop_training = True
                if checkpoint is not None:
                    checkpoint.save()
                    print(f"SIGTERM: stopped at step {self.steps} and saved a checkpoint", flush=True)

    checkpoint = None
    if model is not None and is_chief():
        checkpoint = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), job.checkpoint_dir, max_to_keep=2)
        if checkpoint.latest_checkpoint:
            checkpoint.checkpoint.restore(checkpoint.latest_checkpoint)
            print(f"resumed from {checkpoint.latest_checkpoint}", flush=True)
    result = [Progress()]
    if checkpoint is not None:
        result.append(tf.keras.callbacks.LambdaCallback(on_epoch_end=lambda epoch, logs: checkpoint.save()))
    return result


def tensorboard(batch_size: int, log_steps: int = 100, per_rank: bool = True) -> list:
    """[a Keras callback] writing TensorBoard's runs as the built-in model does
    (trainer.training.tensorboard): `train` and `epoch` from the chief, `rank-<r>` from
    every rank when there are several (`per_rank`). `batch_size`: this rank's."""
    from trainer.training import tensorboard as board

    job = _job_and_plan()[0]
    runs = board.planned_runs(max(rank(), 0), is_chief(), per_rank and world_size() > 1)
    print(f"TensorBoard: {', '.join(runs) or 'nothing'} of this rank into {job.tensorboard_dir}", flush=True)
    return [board.StepScalars(board.Runs(job.tensorboard_dir, runs), batch_size, world_size(), max(rank(), 0),
                              log_steps)]


def export(model, version: int = 1) -> str | None:
    """The model as a SavedModel in TF Serving's layout under SM_MODEL_DIR (chief only)."""
    from trainer.training.saving import export_saved_model

    if not is_chief():
        return None
    return export_saved_model(model, os.environ.get("SM_MODEL_DIR", _job_and_plan()[0].model_dir), version)

"""What a training process reads: its training and evaluation input, and TensorFlow's input
errors turned into errors that name the channel, file and line."""
from __future__ import annotations

import contextlib
import dataclasses
from dataclasses import dataclass

import tensorflow as tf

from trainer.contract.channels import eval_channel_name
from trainer.contract.job import Job
from trainer.data import diagnose
from trainer.data.columns import ColumnSpec
from trainer.data.pipeline import EpochInput, InputSpec, pipe_reader, should_cache
from trainer.errors import EmptyInput, JobError

INPUT_ERRORS = (tf.errors.InvalidArgumentError, tf.errors.DataLossError, tf.errors.UnknownError,
                tf.errors.OutOfRangeError)


@contextlib.contextmanager
def input_errors_explained(specs, hooks, hp):
    """Re-raise TensorFlow's input errors as JobErrors naming the channel, file and line; a
    channel that gave no record at all, as the file that holds bytes but no whole record."""
    try:
        yield
    except INPUT_ERRORS as err:
        explained = diagnose.explain(err, specs, hp.field_size, hp.feature_size, not hooks.custom_parse)
        if explained is None:
            raise
        raise explained from err
    except EmptyInput as err:  # the training input's (the first spec's), never the evaluation's
        training = specs[0]
        found = None if hooks.custom_parse or training.is_pipe else diagnose.find_bad_record(
            training, hp.field_size, hp.feature_size)
        if found is None:
            raise
        raise found from err


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
        """The training input's spec first, then the evaluation's (if it reads one)."""
        return [spec for spec in (self.train_spec, self.eval_spec) if spec]

    @staticmethod
    def training_spec(job: Job, plan, process) -> InputSpec:
        """What `process` reads for training: its channels, their format and columns, its shard."""
        return InputSpec.for_process(job, process, on_data_hosts=plan.data_service is not None)

    @staticmethod
    def training(job: Job, plan, process, hooks, batch_size: int, on_ps_worker: bool = False,
                 spec: InputSpec | None = None) -> EpochInput:
        """The training input of `process` (`spec`: its training_spec, where already read): this
        one, or (`on_ps_worker`) the input every parameter-server worker runs as its own (one
        graph for all: one seed, and a new dataset every epoch, so nothing to cache)."""
        hp = job.hyperparameters
        spec = spec or Inputs.training_spec(job, plan, process)
        if on_ps_worker:
            spec = dataclasses.replace(spec, files=(), on_ps_worker=True)
        return EpochInput(spec, hooks.parse_fn(spec), batch_size, hp.shuffle_buffer,
                          hp.seed + (0 if on_ps_worker else process.rank or 0),
                          not on_ps_worker and plan.data_service is None
                          and should_cache(hp.cache_input, spec, plan.processes_per_host),
                          hp.pipe_wait_sec, "project" if on_ps_worker else pipe_reader(hp.pipe_reader, spec.channels),
                          service=plan.data_service)

    @staticmethod
    def for_process(job: Job, plan, process, hooks, batch_size: int, train_spec: InputSpec | None = None) -> "Inputs":
        hp = job.hyperparameters
        train = Inputs.training(job, plan, process, hooks, batch_size, spec=train_spec)
        train_spec = train.spec
        eval_channel = eval_channel_name(job)
        if eval_channel is None or process.eval_shard is None:
            return Inputs(train_spec, train, eval_channel, None, None)
        eval_spec = InputSpec.for_channels([job.channels[eval_channel]], hp.data_format, process.eval_shard,
                                           column_spec=ColumnSpec.from_hyperparameters(hp),
                                           skip_bad_records=hp.skip_bad_records)
        evaluation = EpochInput(eval_spec, hooks.parse_fn(eval_spec), batch_size,
                                cache=should_cache(hp.cache_input, eval_spec, plan.processes_per_host),
                                pipe_wait_sec=hp.pipe_wait_sec, reader=pipe_reader(hp.pipe_reader, eval_spec.channels))
        return Inputs(train_spec, train, eval_channel, eval_spec, evaluation)

    def describe(self, train: EpochInput | None = None) -> str:
        """The training input (`train`, default this process's own) and the evaluation channel."""
        train = train or self.train
        spec = train.spec
        mode = spec.channels[0].input_mode + (f" read by {train.reader}" if spec.is_pipe else "")
        where = (" on each worker's host" if spec.on_ps_worker else
                 f" through the data hosts' tf.data service ({', '.join(train.service.hosts)})" if train.service else "")
        index = "the worker's index" if spec.on_ps_worker else spec.shard_index
        text = (f"training channel(s) '{spec.name}'{where} ({mode}, {spec.data_format} by {spec.format_why}, "
                f"shard {spec.shard_count}/{index}, cache={train.cache})")
        return text + (f"; evaluation channel '{self.eval_channel}'" if self.eval_channel
                       else "; no evaluation channel")


def with_field_size_of(job: Job, spec: InputSpec) -> Job:
    """The job as its model is built for `spec`: a CSV, TSV or Parquet channel's fields are its
    numeric and categorical columns (field_size follows; one set another way is an error)."""
    import dataclasses

    hp = job.hyperparameters
    if spec.columns is None or spec.columns.field_size == hp.field_size:
        return job
    if "field_size" in hp.explicit:
        raise JobError(f"hyperparameter 'field_size': {hp.field_size}, but channel '{spec.name}' gives "
                       f"{spec.columns.field_size} fields ({len(spec.columns.numeric)} numeric_columns, "
                       f"{len(spec.columns.categorical)} categorical_columns): leave field_size unset")
    return dataclasses.replace(job, hyperparameters=hp.with_value("field_size", spec.columns.field_size))

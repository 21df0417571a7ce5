"""What training starts from: this job's own checkpoint (a restart: resume it exactly), another
job's model (yesterday's: warm-start from its weights and train this job's epochs), or
nothing. A pure decision over what the checkpoint folder and the model channel hold; the
chief carries it out (trainer.training.saving, trainer.training.warm_start).

Own or another's is told by the job that wrote the checkpoint (SageMaker's TRAINING_JOB_NAME,
which a restarted job keeps and a new job does not). A checkpoint without a record, or a job
without a name, cannot be told apart: such a checkpoint resumes, as it always did.
"""
from __future__ import annotations

from dataclasses import dataclass

from trainer.contract.checkpoint_folder import MODEL_SHAPE, CheckpointRecord
from trainer.errors import JobError

INIT_FROM = ("auto", "checkpoint", "model", "none")


@dataclass(frozen=True)
class Source:
    """One thing training may start from: a checkpoint (`path` its prefix) or the model
    channel (`path` its folder). `resume`: this job's own, resumed at its epoch, step and
    input position; else its weights (and optimizer state) only, this job training from step 0."""

    kind: str  # checkpoint | model
    path: str
    resume: bool
    job: str | None = None
    epoch: int | None = None
    step: int | None = None

    def describe(self) -> str:
        what = "checkpoint" if self.kind == "checkpoint" else "model channel"
        details = [f"job {self.job}" if self.job else ("its job not recorded" if self.kind == "checkpoint" else "")]
        if self.epoch is not None:
            details.append(f"{self.epoch} epochs done")
        if self.step is not None:
            details.append(f"step {self.step}")
        details = [d for d in details if d]
        return f"{what} {self.path}" + (f" ({', '.join(details)})" if details else "")


@dataclass(frozen=True)
class Start:
    """How training starts: `sources` tried in order (one that cannot be read is set aside and
    the next tried; none left: the job fails naming each), else from scratch when empty."""

    how: str  # resume | warm_start | fresh
    why: str
    sources: tuple[Source, ...] = ()

    def describe(self) -> str:
        if self.how == "fresh":
            return f"from scratch: {self.why}"
        verb = "resume" if self.how == "resume" else "warm start (weights, then this job's own epochs from step 0)"
        more = f"; if it cannot be read: {', '.join(s.path for s in self.sources[1:])}" if len(self.sources) > 1 else ""
        return f"{verb} from {self.sources[0].describe()}: {self.why}{more}"


def _own(record: CheckpointRecord, job_name: str | None) -> bool:
    return record.job is None or job_name is None or record.job == job_name


def _checkpoint_source(record: CheckpointRecord, resume: bool) -> Source:
    return Source("checkpoint", record.prefix, resume, record.job, record.epoch, record.step)


def choose_start(checkpoints: tuple[CheckpointRecord, ...], job_name: str | None, init_from: str,
           model: Source | None, folder: str, model_channel: str = "model") -> Start:
    """The start of a job named `job_name` whose checkpoint folder `folder` holds
    `checkpoints` (newest first) and whose model channel (if any) is `model`."""
    own = tuple(_checkpoint_source(r, resume=True) for r in checkpoints if _own(r, job_name))
    others = tuple(_checkpoint_source(r, resume=False) for r in checkpoints if not _own(r, job_name))
    if init_from == "model" and model is None:
        raise JobError(f"hyperparameter 'init_from' is model, but the job has no channel '{model_channel}' (a previous "
                       "job's model.tar.gz or SavedModel folder; SDK 2.x: model_uri=, SDK 3.x: an InputData named "
                       f"'{model_channel}')")
    warm = {"auto": ((model,) if model else others), "checkpoint": others, "model": (model,), "none": ()}[init_from]
    if own:
        first = own[0]
        why = ("the job has no name (TRAINING_JOB_NAME) to tell its checkpoints from another job's" if not job_name
               else f"a restart of job {job_name}, which wrote it" if first.job
               else "the checkpoint does not record its job")
        return Start("resume", why, own + warm)
    if warm:
        if warm[0].kind == "model":
            why = f"a new job with a '{model_channel}' channel (init_from={init_from})"
        else:
            why = (f"written by another job; this one is {job_name}: its weights start this job, which trains its own "
                   f"epochs (init_from={init_from}; none: from scratch)")
        return Start("warm_start", why, warm)
    if init_from == "none":
        return Start("fresh", "init_from=none" + (f"; the checkpoints of another job in {folder} are not used"
                                                  if others else ""))
    unused = f"; the '{model_channel}' channel is not used (init_from=checkpoint)" if model else ""
    return Start("fresh", f"no checkpoint in {folder}" + (unused or ("" if init_from == "checkpoint" else
                                                                     f" and no '{model_channel}' channel")))


def refuse_another_shape(source_model: dict | None, this_model: dict, source: str) -> None:
    """A built-in model whose variables have other shapes cannot start from `source`: named,
    with both values, before anything trains."""
    if not source_model or not this_model:  # a user's model: its variables' shapes are compared as it loads
        return
    different = [name for name in MODEL_SHAPE if name in source_model and _same(source_model[name]) != _same(this_model[name])]
    if different:
        both = "; ".join(f"{name}={_shown(source_model[name])} there, {_shown(this_model[name])} here" for name in different)
        raise JobError(f"{source} holds a model of another shape ({both}): set the same value(s) to start from it, "
                       "or init_from=none to train from scratch")


def _same(value):
    return list(value) if isinstance(value, (list, tuple)) else value


def _shown(value) -> str:
    return ",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value)

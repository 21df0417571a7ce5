"""Which channel is for training and which for evaluation, by name (never by position:
SM_CHANNELS is sorted alphabetically, not in the order the user passed them; P2)."""
from __future__ import annotations

from trainer.contract.job import Channel, Job
from trainer.errors import JobError

TRAIN_ALIASES = {"training": ("training", "train"), "train": ("train", "training")}
EVAL_NAMES = ("evaluation", "eval", "validation", "test")


def _available(job: Job) -> str:
    return ", ".join(sorted(job.channels)) or "none"


def pick_train_channel(job: Job) -> Channel:
    wanted = job.hyperparameters.train_channel
    for name in TRAIN_ALIASES.get(wanted, (wanted,)):
        if name in job.channels:
            return job.channels[name]
    raise JobError(f"training channel '{wanted}' is missing; channels given: {_available(job)} "
                   "(name the training channel 'training', or set train_channel)")


def pick_eval_channel(job: Job) -> Channel | None:
    wanted = job.hyperparameters.eval_channel
    if wanted:
        if wanted not in job.channels:
            raise JobError(f"evaluation channel '{wanted}' (eval_channel) is missing; "
                           f"channels given: {_available(job)}")
        return job.channels[wanted]
    for name in EVAL_NAMES:
        if name in job.channels:
            return job.channels[name]
    return None

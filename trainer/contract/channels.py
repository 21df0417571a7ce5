"""Which channel is for training and which for evaluation, by name (never by position:
SM_CHANNELS is sorted alphabetically, not in the order the user passed them; P2)."""
from __future__ import annotations

import re

from trainer.contract.job import Channel, Job
from trainer.errors import JobError

TRAIN_ALIASES = {"training": ("training", "train"), "train": ("train", "training")}
EVAL_NAMES = ("evaluation", "eval", "validation", "test")


def _available(job: Job) -> str:
    return ", ".join(sorted(job.channels)) or "none"


def training_channels(job: Job) -> list[Channel]:
    """The training channels: `training` and/or `training-<k>` (or the train_channel name),
    ordered by k. Several of them give each process of a host its own (P1)."""
    wanted = job.hyperparameters.train_channel
    for base in TRAIN_ALIASES.get(wanted, (wanted,)):
        numbered = re.compile(re.escape(base) + r"-(\d+)")
        names = [n for n in job.channels if n == base or numbered.fullmatch(n)]
        if names:
            names.sort(key=lambda n: 0 if n == base else int(numbered.fullmatch(n).group(1)))
            return [job.channels[n] for n in names]
    raise JobError(f"training channel '{wanted}' is missing; channels given: {_available(job)} "
                   "(name the training channel 'training', or set train_channel)")


def eval_channel_name(job: Job) -> str | None:
    wanted = job.hyperparameters.eval_channel
    if wanted:
        if wanted not in job.channels:
            raise JobError(f"evaluation channel '{wanted}' (eval_channel) is missing; "
                           f"channels given: {_available(job)}")
        return wanted
    return next((name for name in EVAL_NAMES if name in job.channels), None)


"""What a checkpoint folder holds, read without TensorFlow (the plan says what training will
start from before TensorFlow starts).

Every checkpoint `ckpt-<N>` the trainer writes has a record beside it, `ckpt-<N>.json`: the
job that wrote it (SageMaker's TRAINING_JOB_NAME), its epoch and step, the model's shape
hyperparameters and optimizer. The record is written (atomically) before TensorFlow writes
the checkpoint, so a checkpoint never lacks one; a record whose checkpoint never completed
(a stop during the save) has no index file and is not listed.
"""
from __future__ import annotations

import dataclasses
import json
import os
import re

RECORD_SUFFIX = ".json"
STATE_FILE = "checkpoint"  # TensorFlow's CheckpointManager's list of the folder's checkpoints
SET_ASIDE = "set-aside"  # where checkpoints that cannot be read are moved
_NUMBERED = re.compile(r"ckpt-(\d+)\.index")
_STATE_ENTRY = re.compile(r'^\s*(?:all_)?model_checkpoint_paths?:\s*"(.*)"\s*$')
# The hyperparameters that give the built-in model's variables their shapes.
MODEL_SHAPE = ("feature_size", "field_size", "embedding_size", "deep_layers")


@dataclasses.dataclass(frozen=True)
class CheckpointRecord:
    """One checkpoint of the folder: its prefix (the path TensorFlow restores) and what its
    record says (job None: written without a record, by an earlier version)."""

    prefix: str
    number: int
    job: str | None = None
    epoch: int | None = None
    epoch_step: int = 0
    step: int | None = None
    model: dict | None = None  # the built-in model's MODEL_SHAPE values; None for hooks' models
    optimizer: str | None = None

    @property
    def name(self) -> str:
        return os.path.basename(self.prefix)

    def describe(self) -> str:
        written = f"job {self.job}" if self.job else "a job not recorded"
        done = "" if self.epoch is None else f", {self.epoch} epochs" + (
            f" and {self.epoch_step} steps" if self.epoch_step else "") + " done"
        return f"{self.prefix} ({written}{done}{'' if self.step is None else f', step {self.step}'})"


def record_path(prefix: str) -> str:
    return prefix + RECORD_SUFFIX


def checkpoints_in(directory: str) -> tuple[CheckpointRecord, ...]:
    """The folder's complete checkpoints, newest first: those TensorFlow's state file lists
    and those whose index file is there (a folder synced from S3 may lack the state file)."""
    if not directory or not os.path.isdir(directory):
        return ()
    numbers = set()
    for name in os.listdir(directory):
        match = _NUMBERED.fullmatch(name)
        if match:
            numbers.add(int(match.group(1)))
    for prefix in _listed_in_state(directory):
        match = re.fullmatch(r"ckpt-(\d+)", os.path.basename(prefix))
        if match:
            numbers.add(int(match.group(1)))
    return tuple(_read_record(os.path.join(directory, f"ckpt-{number}"), number)
                 for number in sorted(numbers, reverse=True))


def _listed_in_state(directory: str) -> list[str]:
    try:
        with open(os.path.join(directory, STATE_FILE), encoding="utf-8", errors="replace") as f:
            return [m.group(1) for m in map(_STATE_ENTRY.match, f) if m]
    except OSError:
        return []


def _read_record(prefix: str, number: int) -> CheckpointRecord:
    try:
        with open(record_path(prefix), encoding="utf-8") as f:
            values = json.load(f)
    except (OSError, ValueError):
        return CheckpointRecord(prefix, number)  # no record (or a damaged one): its job is not known
    if not isinstance(values, dict):
        return CheckpointRecord(prefix, number)
    fields = {f.name for f in dataclasses.fields(CheckpointRecord)} - {"prefix", "number"}
    return CheckpointRecord(prefix, number, **{key: values[key] for key in fields if key in values})


def write_record(record: CheckpointRecord) -> None:
    """The record of a checkpoint about to be written, atomically (a rename)."""
    values = {key: value for key, value in dataclasses.asdict(record).items() if key != "prefix"}
    path = record_path(record.prefix)
    partial = f"{path}.partial"
    with open(partial, "w", encoding="utf-8") as f:
        json.dump(values, f, indent=1)
    os.replace(partial, path)


def prune_records(directory: str, kept_prefixes) -> None:
    """Remove the records of checkpoints no longer kept (TensorFlow removes their files)."""
    kept = {os.path.basename(prefix) + RECORD_SUFFIX for prefix in kept_prefixes}
    for name in os.listdir(directory):
        if re.fullmatch(r"ckpt-\d+\.json", name) and name not in kept:
            try:
                os.remove(os.path.join(directory, name))
            except OSError:
                pass


def set_aside(prefix: str) -> str:
    """Move a checkpoint that cannot be read (its files and record) into <folder>/set-aside,
    where it is kept for a look but never tried again; returns that folder."""
    directory = os.path.dirname(prefix)
    aside = os.path.join(directory, SET_ASIDE)
    os.makedirs(aside, exist_ok=True)
    base = os.path.basename(prefix)
    for name in os.listdir(directory):
        if name == base + RECORD_SUFFIX or name.startswith(base + "."):
            os.replace(os.path.join(directory, name), os.path.join(aside, name))
    return aside

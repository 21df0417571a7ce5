"""AWS's PipeModeDataset for the lines it does not exist on (TensorFlow 2.16 and later).

A script written for AWS's TensorFlow containers does `from sagemaker_tensorflow import
PipeModeDataset`; AWS stopped building that package at TensorFlow 2.15 (a C++ op linked
against each TensorFlow release). The 2.21 image installs a `sagemaker_tensorflow` package
that serves this one, written on tf.data and the project's FIFO reader (trainer.data.fifo):
the same constructor and errors, the same record formats (RecordIO, TFRecord, TextLine), and
the same epoch counter: each new iterator reads the channel's next FIFO (`<channel>_<n>`),
counted in `<state_dir>/.<channel>-pipe_mode-state` under a lock file beside it, so a
`.repeat()` or a second `fit` epoch reads the next epoch's FIFO as AWS's does. One difference:
a FIFO that never appears, or that nobody writes to, fails the iterator after `wait_sec`
(default 600 s, as the built-in model's pipe_wait_sec) naming it, instead of blocking.
"""
from __future__ import annotations

import fcntl
import json
import os

from trainer.data import fifo

RECORD_FORMATS = ("RecordIO", "TFRecord", "TextLine")
DEFAULT_WAIT_SEC = 600.0


class PipeModeDatasetException(Exception):
    """An error using a PipeModeDataset (AWS's name, so a script's `except` still catches it)."""


def _check_channel(channel: str, config_dir: str) -> None:
    with open(os.path.join(config_dir, "inputdataconfig.json")) as config:
        input_data_config = json.load(config)
    if channel not in input_data_config:
        raise PipeModeDatasetException(f"Channel {channel} not found in Training Job InputDataConfig")
    if input_data_config[channel].get("TrainingInputMode", "").lower() != "pipe":
        raise PipeModeDatasetException(f"Channel {channel} is not a PipeMode channel")


def next_pipe_index(state_dir: str, channel: str) -> int:
    """The index of the FIFO the next iterator reads, counted up under the lock AWS's uses."""
    state = os.path.join(state_dir, f".{channel}-pipe_mode-state")
    with open(os.path.join(state_dir, f".{channel}-pipe_mode-lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            with open(state) as stored:
                index = int(stored.read().strip() or 0)
        except FileNotFoundError:
            index = 0
        with open(state, "w") as stored:
            stored.write(str(index + 1))
    return index


def _chunks(channel: str, record_format: str, state_dir: str, pipe_dir: str, wait_sec: float):
    path = os.path.join(pipe_dir, f"{channel}_{next_pipe_index(state_dir, channel)}")
    if record_format == "RecordIO":
        return fifo.recordio_chunks(path, wait_sec=wait_sec)
    return fifo.record_chunks(path, "tfrecord" if record_format == "TFRecord" else "libsvm", wait_sec)


def PipeModeDataset(channel, record_format="RecordIO", state_dir=None, pipe_dir=None,  # noqa: N802 (AWS's name)
                    config_dir=None, benchmark=False, wait_sec=DEFAULT_WAIT_SEC):
    """A tf.data.Dataset of the channel's records (scalar strings), one FIFO per iterator.
    The folders default to AWS's, under /opt/ml (or $SAGEMAKER_BASE_DIR where a job's folder
    is elsewhere, as in `trainer local`). `benchmark` (AWS's throughput printout) is accepted
    and ignored."""
    import tensorflow as tf

    base = os.environ.get("SAGEMAKER_BASE_DIR", "/opt/ml")
    state_dir = state_dir or os.path.join(base, "pipe_state")
    pipe_dir = pipe_dir or os.path.join(base, "input", "data")
    config_dir = config_dir or os.path.join(base, "input", "config")
    if record_format not in RECORD_FORMATS:
        raise PipeModeDatasetException(f"record_format {record_format!r}: one of {', '.join(RECORD_FORMATS)}")
    os.makedirs(state_dir, exist_ok=True)
    _check_channel(channel, config_dir)
    # Chunks of records cross from Python to TensorFlow at once; unbatch gives AWS's scalars.
    chunks = tf.data.Dataset.from_generator(
        lambda: _chunks(channel, record_format, state_dir, pipe_dir, wait_sec),
        output_signature=tf.TensorSpec([None], tf.string))
    return chunks.unbatch()

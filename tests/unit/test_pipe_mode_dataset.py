"""The project's PipeModeDataset (the 2.21 line's `sagemaker_tensorflow`): AWS's constructor,
errors, record formats and epoch counter, on FIFOs fed as SageMaker's agent feeds them."""
import json

import pytest
import tensorflow as tf

from trainer.data.fifo import recordio_record
from trainer.local.runner import PipeFeeder
from trainer.pipe_mode_dataset import PipeModeDataset, PipeModeDatasetException


def job_folders(tmp_path, channels):
    """config/inputdataconfig.json with `channels` ({name: input mode}), and data/."""
    (tmp_path / "config").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "config" / "inputdataconfig.json").write_text(json.dumps(
        {name: {"TrainingInputMode": mode} for name, mode in channels.items()}))
    return {"pipe_dir": str(tmp_path / "data"), "config_dir": str(tmp_path / "config"),
            "state_dir": str(tmp_path / "state")}


def feed(tmp_path, channel, files, recordio=False):
    feeder = PipeFeeder(str(tmp_path / "data" / channel), [str(f) for f in files], recordio=recordio)
    feeder.start()
    return feeder


def test_each_iterator_reads_the_next_epoch_s_fifo(tmp_path):
    folders = job_folders(tmp_path, {"training": "Pipe"})
    with tf.io.TFRecordWriter(str(tmp_path / "a.tfrecord")) as writer:
        for i in range(5000):
            writer.write(b"r%d" % i)
    feeder = feed(tmp_path, "training", [tmp_path / "a.tfrecord"])
    try:
        dataset = PipeModeDataset("training", record_format="TFRecord", wait_sec=30, **folders)
        assert dataset.element_spec == tf.TensorSpec([], tf.string)  # scalars, as AWS's
        first = [r.numpy() for r in dataset]
        second = [r.numpy() for r in dataset.take(3)]  # a second iterator: the FIFO of epoch 1
    finally:
        feeder.stop()
    assert first == [b"r%d" % i for i in range(5000)] and second == [b"r0", b"r1", b"r2"]
    assert (tmp_path / "state" / ".training-pipe_mode-state").read_text() == "2"  # AWS's state file


def test_recordio_yields_each_record_whole_and_textline_yields_lines(tmp_path):
    folders = job_folders(tmp_path, {"objects": "Pipe", "lines": "Pipe"})
    payloads = [b"one", b"\x0a\x23\xd7\xce" * 3 + b"magic inside", b""]
    (tmp_path / "objects.bin").write_bytes(b"".join(recordio_record(p) for p in payloads))
    (tmp_path / "lines.txt").write_text("1 1:1\n0 2:1\n")
    feeders = [feed(tmp_path, "objects", [tmp_path / "objects.bin"]), feed(tmp_path, "lines", [tmp_path / "lines.txt"])]
    try:
        objects = [r.numpy() for r in PipeModeDataset("objects", wait_sec=30, **folders)]  # RecordIO: the default
        lines = [r.numpy() for r in PipeModeDataset("lines", record_format="TextLine", wait_sec=30, **folders)]
    finally:
        for feeder in feeders:
            feeder.stop()
    assert objects == payloads and lines == [b"1 1:1", b"0 2:1"]


@pytest.mark.parametrize("channel, record_format, message", [
    ("missing", "TFRecord", "Channel missing not found in Training Job InputDataConfig"),
    ("files", "TFRecord", "Channel files is not a PipeMode channel"),
    ("training", "Parquet", "record_format 'Parquet': one of RecordIO, TFRecord, TextLine"),
])
def test_aws_s_errors_for_a_wrong_channel_mode_or_format(tmp_path, channel, record_format, message):
    folders = job_folders(tmp_path, {"training": "Pipe", "files": "File"})
    with pytest.raises(PipeModeDatasetException, match=message):
        PipeModeDataset(channel, record_format=record_format, **folders)


def test_a_fifo_that_never_appears_fails_naming_it(tmp_path):
    folders = job_folders(tmp_path, {"training": "Pipe"})
    dataset = PipeModeDataset("training", record_format="TFRecord", wait_sec=0.5, **folders)
    with pytest.raises(Exception) as error:
        list(dataset)
    assert f"Pipe-mode FIFO {tmp_path / 'data' / 'training_0'} did not appear within 0 s" in str(error.value)

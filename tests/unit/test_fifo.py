"""Pipe mode for real: FIFOs fed like SageMaker's agent does, read by the project's reader."""
import os
import time

import pytest
import tensorflow as tf

from trainer.data.fifo import fifo_blocks, line_chunks, tfrecord_chunks, wait_for_fifo
from trainer.errors import JobError
from trainer.local.runner import PipeFeeder


def write_tfrecords(path, payloads):
    with tf.io.TFRecordWriter(str(path)) as writer:
        for payload in payloads:
            writer.write(payload)


def test_feeder_streams_every_file_once_per_epoch(tmp_path):
    payloads = [bytes([i % 256]) * (i * 37 % 5000) for i in range(3000)]
    write_tfrecords(tmp_path / "a.tfrecord", payloads[:1000])
    write_tfrecords(tmp_path / "b.tfrecord", payloads[1000:])
    feeder = PipeFeeder(str(tmp_path / "training"), [str(tmp_path / "a.tfrecord"), str(tmp_path / "b.tfrecord")])
    feeder.start()
    try:
        for epoch in range(3):
            path = str(tmp_path / f"training_{epoch}")
            wait_for_fifo(path, 10)
            records = [r for chunk in tfrecord_chunks(path, records_per_chunk=500) for r in chunk]
            assert records == payloads, epoch
    finally:
        feeder.stop()
        feeder.join(5)
    assert not feeder.is_alive() and feeder.epochs_fed >= 3


def test_tensorflow_reads_the_fifo_as_a_dataset(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"x%d" % i for i in range(10000)])
    feeder = PipeFeeder(str(tmp_path / "ch"), [str(tmp_path / "a.tfrecord")])
    feeder.start()
    try:
        wait_for_fifo(str(tmp_path / "ch_0"), 10)
        got = [r.numpy() for r in fifo_blocks(str(tmp_path / "ch_0"), "tfrecord").unbatch()]
    finally:
        feeder.stop()
        feeder.join(5)
    assert got == [b"x%d" % i for i in range(10000)]


def test_text_lines(tmp_path):
    (tmp_path / "a.txt").write_text("1 1:1\n\n0 2:1\n")
    assert [l for c in line_chunks(str(tmp_path / "a.txt")) for l in c] == [b"1 1:1", b"0 2:1"]


def test_truncated_stream_names_the_fifo_and_record(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"y" * 100] * 5)
    data = (tmp_path / "a.tfrecord").read_bytes()
    (tmp_path / "cut").write_bytes(data[:-30])
    with pytest.raises(JobError, match=r"cut: stream ends inside record 4 \(truncated\)"):
        list(tfrecord_chunks(str(tmp_path / "cut")))


def test_not_tfrecord_is_a_clear_error(tmp_path):
    (tmp_path / "text").write_bytes(b"1 1:0.5 2:0.25 3:1 4:1 5:1\n" * 10)
    with pytest.raises(JobError, match="impossible length"):
        list(tfrecord_chunks(str(tmp_path / "text")))


def test_a_fifo_that_never_appears_fails_in_bounded_time(tmp_path):
    started = time.monotonic()
    with pytest.raises(JobError, match=r"Pipe-mode FIFO .*training_0 did not appear within 1 s"):
        wait_for_fifo(str(tmp_path / "training_0"), 1.0)
    assert time.monotonic() - started < 30  # a hang guard: the bound is the 1 s asked for


def test_a_plain_file_where_a_fifo_belongs(tmp_path):
    (tmp_path / "training_0").write_text("x")
    with pytest.raises(JobError, match="exists but is not a FIFO"):
        wait_for_fifo(str(tmp_path / "training_0"), 1.0)


def test_feeder_stops_while_nobody_reads(tmp_path):
    (tmp_path / "a").write_bytes(b"data")
    feeder = PipeFeeder(str(tmp_path / "ch"), [str(tmp_path / "a")])
    feeder.start()
    wait_for_fifo(str(tmp_path / "ch_0"), 10)
    feeder.stop()
    feeder.join(5)
    assert not feeder.is_alive() and not os.path.exists(tmp_path / "ch_0")


def test_reader_that_stops_early_does_not_block_the_feeder(tmp_path):
    (tmp_path / "big").write_bytes(b"z" * (8 << 20))
    feeder = PipeFeeder(str(tmp_path / "ch"), [str(tmp_path / "big")])
    feeder.start()
    try:
        wait_for_fifo(str(tmp_path / "ch_0"), 10)
        with open(tmp_path / "ch_0", "rb") as f:
            f.read(1000)
        wait_for_fifo(str(tmp_path / "ch_1"), 10)  # the next epoch's FIFO comes anyway
    finally:
        feeder.stop()
        feeder.join(5)
    assert not feeder.is_alive()

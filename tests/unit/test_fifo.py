"""Pipe mode for real: FIFOs fed like SageMaker's agent does, read by the project's reader."""
import os
import time

import pytest
import tensorflow as tf

import gzip

from trainer.data.fifo import RECORDIO_MAGIC_BYTES, fifo_blocks, line_chunks, recordio_record, tfrecord_chunks, wait_for_fifo
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


# payloads -> what a RecordIO record of each must give back
RECORDIO_PAYLOADS = {
    "empty": b"",
    "unaligned length": b"abcde",
    "the magic number at a 4-byte boundary (split in parts)": b"abcd" + RECORDIO_MAGIC_BYTES + b"efgh" + RECORDIO_MAGIC_BYTES,
    "the magic number off the boundary (not split)": b"ab" + RECORDIO_MAGIC_BYTES + b"cd",
    "three parts": RECORDIO_MAGIC_BYTES + b"1234" + RECORDIO_MAGIC_BYTES + b"5",
}


@pytest.mark.parametrize("name", RECORDIO_PAYLOADS)
def test_a_recordio_record_gives_back_its_payload(tmp_path, name):
    from trainer.data.fifo import RecordIOPayloads

    payload = RECORDIO_PAYLOADS[name]
    framed = recordio_record(payload)
    assert len(framed) % 4 == 0
    (tmp_path / "stream").write_bytes(framed * 2)
    with RecordIOPayloads(open(tmp_path / "stream", "rb", buffering=0), "stream", b"|") as stream:
        assert stream.read() == payload + b"|" + payload + b"|"


def test_tfrecord_and_libsvm_files_inside_recordio_records(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"a%d" % i for i in range(300)])
    write_tfrecords(tmp_path / "b.tfrecord", [b"b%d" % i for i in range(200)])
    wrapped = b"".join(recordio_record((tmp_path / f"{n}.tfrecord").read_bytes()) for n in "ab")
    (tmp_path / "tfrecords").write_bytes(wrapped)
    records = [r for chunk in tfrecord_chunks(str(tmp_path / "tfrecords"), recordio=True) for r in chunk]
    assert records == [b"a%d" % i for i in range(300)] + [b"b%d" % i for i in range(200)]
    # a text file without its last newline still ends its last line
    (tmp_path / "lines").write_bytes(recordio_record(b"1 1:1\n0 2:1") + recordio_record(b"1 3:1\n"))
    assert [l for c in line_chunks(str(tmp_path / "lines"), recordio=True) for l in c] == [b"1 1:1", b"0 2:1", b"1 3:1"]


def test_a_recordio_stream_read_as_plain_tfrecord_names_recordwrappertype(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"x"] * 3)
    (tmp_path / "wrapped").write_bytes(recordio_record((tmp_path / "a.tfrecord").read_bytes()))
    with pytest.raises(JobError, match="RecordIO-wrapped .* RecordWrapperType is None: set RecordWrapperType=RecordIO"):
        list(tfrecord_chunks(str(tmp_path / "wrapped")))


def test_a_gzip_stream_names_compressiontype(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"x"] * 3)
    (tmp_path / "a.gz").write_bytes(gzip.compress((tmp_path / "a.tfrecord").read_bytes()))
    with pytest.raises(JobError, match="gzip-compressed but the channel's CompressionType is None: set CompressionType=Gzip"):
        list(tfrecord_chunks(str(tmp_path / "a.gz")))


def test_a_record_whose_length_starts_with_gzips_bytes_is_read(tmp_path):
    payload = b"z" * 0x8B1F  # its length's first bytes are gzip's magic number
    write_tfrecords(tmp_path / "a.tfrecord", [payload, b"next"])
    assert [r for c in tfrecord_chunks(str(tmp_path / "a.tfrecord")) for r in c] == [payload, b"next"]


def test_a_plain_stream_read_as_recordio_names_recordwrappertype(tmp_path):
    write_tfrecords(tmp_path / "a.tfrecord", [b"x"] * 3)
    with pytest.raises(JobError, match="RecordWrapperType is RecordIO but its stream is not RecordIO"):
        list(tfrecord_chunks(str(tmp_path / "a.tfrecord"), recordio=True))


@pytest.mark.parametrize("gunzip, recordio", [(True, False), (False, True), (True, True)])
def test_the_feeder_streams_as_sagemaker_does_for_gzip_and_recordio_channels(tmp_path, gunzip, recordio):
    payloads = [b"r%d" % i for i in range(1000)]
    write_tfrecords(tmp_path / "a.tfrecord", payloads)
    source = tmp_path / "a.tfrecord"
    if gunzip:
        source = tmp_path / "a.tfrecord.gz"
        source.write_bytes(gzip.compress((tmp_path / "a.tfrecord").read_bytes()))
    feeder = PipeFeeder(str(tmp_path / "ch"), [str(source)], gunzip=gunzip, recordio=recordio)
    feeder.start()
    try:
        wait_for_fifo(str(tmp_path / "ch_0"), 10)
        records = [r for chunk in tfrecord_chunks(str(tmp_path / "ch_0"), wait_sec=10, recordio=recordio) for r in chunk]
    finally:
        feeder.stop()
        feeder.join(5)
    assert records == payloads  # plain records: SageMaker decompresses a Gzip channel in Pipe mode


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


def test_a_fifo_nobody_feeds_fails_in_bounded_time_naming_it(tmp_path):
    os.mkfifo(tmp_path / "training_0")  # SageMaker made it; nothing ever writes to it
    started = time.monotonic()
    with pytest.raises(JobError, match=r"Pipe-mode FIFO .*training_0 received no data within 1 s \(pipe_wait_sec\)"):
        list(tfrecord_chunks(str(tmp_path / "training_0"), wait_sec=1.0))
    assert time.monotonic() - started < 30  # a hang guard: the bound is the 1 s asked for


def test_an_empty_stream_is_an_empty_epoch_not_a_wait(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    feeder = PipeFeeder(str(tmp_path / "ch"), [str(tmp_path / "empty")])
    feeder.start()
    try:
        assert list(tfrecord_chunks(str(tmp_path / "ch_0"), wait_sec=10)) == []
    finally:
        feeder.stop()
        feeder.join(5)


@pytest.fixture
def pipe_job(tmp_path):
    """A job folder with a Pipe-mode channel 'training' on host algo-2, and its job."""
    from trainer.contract.job import read_job
    from trainer.local.runner import LocalJob

    write_tfrecords(tmp_path / "a.tfrecord", [b"r%d" % i for i in range(5000)])
    local = LocalJob({"training": [str(tmp_path / "a.tfrecord")]}, {"pipe_wait_sec": "2"}, input_mode="Pipe",
                     hosts=2)
    folder = local.lay_out(str(tmp_path / "job"))["algo-2"]
    return read_job(folder), str(tmp_path / "a.tfrecord")


def test_a_parameter_server_worker_reads_its_fifo_through_its_named_functions(pipe_job):
    """What a worker task provides, called by name as the coordinator's graphs call it."""
    from trainer.data import ps_worker_input

    job, source = pipe_job
    ps_worker_input.provide(job, 1)
    assert int(ps_worker_input.worker_index()) == 1
    feeder = PipeFeeder(job.channels["training"].path, [source])
    feeder.start()
    try:
        for pass_index in range(2):  # one FIFO per epoch, each read whole
            blocks = ps_worker_input.host_fifo_blocks("training", pass_index, "tfrecord")
            assert [r.numpy() for r in blocks.unbatch()] == [b"r%d" % i for i in range(5000)]
    finally:
        feeder.stop()
        feeder.join(5)


def test_a_parameter_server_worker_whose_fifo_is_never_fed_names_its_host_and_channel(pipe_job):
    from trainer.data import ps_worker_input

    job, _ = pipe_job
    os.mkfifo(job.channels["training"].fifo_path(0))
    ps_worker_input.provide(job, 1)
    with pytest.raises(tf.errors.OpError, match=r"JobError: algo-2: channel 'training': Pipe-mode FIFO "
                                                r".*training_0 received no data within 2 s"):
        list(ps_worker_input.host_fifo_blocks("training", 0, "tfrecord"))

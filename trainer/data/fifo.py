"""Reading a Pipe-mode FIFO: records streamed by SageMaker's agent, one FIFO per epoch.

TensorFlow's file readers use pread(), which a FIFO refuses ("Illegal seek"), so
`tf.data.TFRecordDataset` cannot read one. Where AWS's PipeModeDataset is installed (the
image's Python) it is used instead of this reader; elsewhere these generators read the
stream with plain read() calls and hand TensorFlow whole chunks of records, so the
per-element cost of `Dataset.from_generator` is paid once per chunk.
"""
from __future__ import annotations

import io
import os
import select
import stat
import struct
import time

from trainer.errors import JobError

READ_SIZE = 4 << 20
RECORDS_PER_CHUNK = 4096
MAX_RECORD_BYTES = 1 << 30  # a larger length means the stream is not TFRecord framing


def wait_for_fifo(path: str, timeout_sec: float, poll_sec: float = 0.05) -> None:
    """Wait for SageMaker's agent to create the epoch's FIFO; fail clearly if it never does."""
    deadline = time.monotonic() + timeout_sec
    while True:
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        if mode is not None:
            if not stat.S_ISFIFO(mode):
                raise JobError(f"Pipe-mode input {path} exists but is not a FIFO")
            return
        if time.monotonic() >= deadline:
            raise JobError(
                f"Pipe-mode FIFO {path} did not appear within {timeout_sec:.0f} s "
                "(is the channel declared Pipe, and does its S3 prefix hold data?)")
        time.sleep(poll_sec)


def open_fifo(path: str, wait_sec: float):
    """Open the epoch's FIFO for reading once it exists and its writer has started (its
    first bytes, or its end), both within `wait_sec`; a FIFO that nobody ever feeds fails
    here, naming it, where a plain open() would block for ever."""
    deadline = time.monotonic() + wait_sec
    wait_for_fifo(path, wait_sec)
    # A non-blocking open returns at once, writer or not; poll() then waits for data, or for
    # a writer's end (an empty channel): POLLHUP comes only after a writer has been there.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP)
        if not poller.poll(max(0.0, deadline - time.monotonic()) * 1000):
            raise JobError(f"Pipe-mode FIFO {path} received no data within {wait_sec:.0f} s (pipe_wait_sec): "
                           "nothing writes to it (does the channel's S3 prefix hold data?)")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb", buffering=0)
    except BaseException:
        os.close(fd)
        raise


def _open_stream(path: str, wait_sec: float | None):
    """A FIFO (waited for, when `wait_sec` is given) or a plain file, read unbuffered."""
    return open(path, "rb", buffering=0) if wait_sec is None else open_fifo(path, wait_sec)


def tfrecord_chunks(path: str, records_per_chunk: int = RECORDS_PER_CHUNK, wait_sec: float | None = None):
    """Yield lists of serialized records from a TFRecord stream (CRCs are not checked)."""
    buffer = bytearray()
    offset = 0
    record_index = 0
    chunk = []
    with _open_stream(path, wait_sec) as stream:
        eof = False
        while not eof or offset < len(buffer):
            if len(buffer) - offset < 12 and not eof:
                data = stream.read(READ_SIZE)
                if data:
                    del buffer[:offset]
                    offset = 0
                    buffer += data
                    continue
                eof = True
                continue
            if len(buffer) - offset < 12:
                raise JobError(f"{path}: stream ends inside the header of record {record_index} (truncated)")
            (length,) = struct.unpack_from("<Q", buffer, offset)
            if length > MAX_RECORD_BYTES:
                raise JobError(f"{path}: record {record_index} has an impossible length {length}; "
                               "the stream is not TFRecord (set data_format=libsvm or the channel's "
                               "ContentType for text) or is corrupt")
            end = offset + 12 + length + 4
            while len(buffer) < end and not eof:
                data = stream.read(max(READ_SIZE, end - len(buffer)))
                if not data:
                    eof = True
                    break
                buffer += data
            if len(buffer) < end:
                raise JobError(f"{path}: stream ends inside record {record_index} (truncated)")
            chunk.append(bytes(buffer[offset + 12:offset + 12 + length]))
            offset = end
            record_index += 1
            if len(chunk) >= records_per_chunk:
                yield chunk
                chunk = []
                del buffer[:offset]
                offset = 0
    if chunk:
        yield chunk


def line_chunks(path: str, records_per_chunk: int = RECORDS_PER_CHUNK, wait_sec: float | None = None):
    """Yield lists of non-empty text lines from a stream."""
    chunk = []
    with _open_stream(path, wait_sec) as raw, io.BufferedReader(raw, READ_SIZE) as stream:
        for line in stream:
            line = line.strip()
            if line:
                chunk.append(line)
                if len(chunk) >= records_per_chunk:
                    yield chunk
                    chunk = []
    if chunk:
        yield chunk


def record_chunks(path: str, data_format: str, wait_sec: float | None = None):
    """The records of a stream in chunks, framed as `data_format` says."""
    chunks = tfrecord_chunks if data_format == "tfrecord" else line_chunks
    return chunks(path, wait_sec=wait_sec)


def fifo_blocks(path: str, data_format: str, wait_sec: float | None = None):
    """A tf.data.Dataset of the serialized records streamed through the FIFO `path`, in
    blocks (1-D string tensors) as the pipeline takes them."""
    import tensorflow as tf

    return tf.data.Dataset.from_generator(
        lambda: record_chunks(path, data_format, wait_sec), output_signature=tf.TensorSpec([None], tf.string))

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


def open_stream(path: str, wait_sec: float | None, recordio: bool = False, separator: bytes = b""):
    """A FIFO (waited for, when `wait_sec` is given) or a plain file, read unbuffered;
    `recordio`: the payloads of its RecordIO records, each followed by `separator`."""
    stream = open(path, "rb", buffering=0) if wait_sec is None else open_fifo(path, wait_sec)
    return RecordIOPayloads(stream, path, separator) if recordio else stream


GZIP_MAGIC_BYTES = b"\x1f\x8b"
RECORDIO_MAGIC = 0xCED7230A
RECORDIO_MAGIC_BYTES = struct.pack("<I", RECORDIO_MAGIC)
RECORDIO_LENGTH_BITS = 29


def recordio_record(payload: bytes) -> bytes:
    """`payload` as one RecordIO record, as MXNet's writer frames it (and SageMaker each S3
    object of a RecordIO-wrapped Pipe channel): split in parts where RecordIO's magic number
    sits at a 4-byte boundary inside it, each part padded to 4 bytes."""
    if len(payload) >= 1 << RECORDIO_LENGTH_BITS:
        raise ValueError(f"a RecordIO record holds under {1 << RECORDIO_LENGTH_BITS} bytes, not {len(payload)}")
    parts, start = [], 0
    for position in range(0, len(payload) - 3, 4):
        if payload[position:position + 4] == RECORDIO_MAGIC_BYTES:
            parts.append(payload[start:position])
            start = position + 4
    parts.append(payload[start:])
    framed = bytearray()
    for number, part in enumerate(parts):
        flag = 0 if len(parts) == 1 else 1 if number == 0 else 3 if number == len(parts) - 1 else 2
        framed += struct.pack("<II", RECORDIO_MAGIC, (flag << RECORDIO_LENGTH_BITS) | len(part))
        framed += part + b"\0" * (-len(part) % 4)
    return bytes(framed)


class RecordIOPayloads(io.RawIOBase):
    """The bytes inside a stream of RecordIO records (MXNet's framing, which SageMaker's
    RecordWrapperType=RecordIO puts around each S3 object in Pipe mode): for each record, its
    payload, then `separator`. A header is a magic number and a word holding a 3-bit
    continuation flag and a 29-bit length; the payload is padded to 4 bytes; a record split
    in parts (at each magic number inside it) gets the magic number back between them.
    Written here because the readers that know this framing (MXNet's, PipeModeDataset's
    RecordIO mode) yield whole objects, not a stream the TFRecord and line readers take."""

    def __init__(self, raw, path: str, separator: bytes = b""):
        super().__init__()
        self.raw, self.path, self.separator = raw, path, separator
        self.pending = bytearray()
        self.records = 0
        self.ended = False

    def readable(self) -> bool:
        return True

    def readinto(self, target) -> int:
        while not self.pending and not self.ended:
            self._next_part()
        count = min(len(target), len(self.pending))
        target[:count] = self.pending[:count]
        del self.pending[:count]
        return count

    def _exactly(self, count: int, what: str) -> bytes | None:
        data = bytearray()
        while len(data) < count:
            chunk = self.raw.read(count - len(data))
            if not chunk:
                if not data and what == "header":
                    return None
                raise JobError(f"{self.path}: stream ends inside the {what} of RecordIO record {self.records} (truncated)")
            data += chunk
        return bytes(data)

    def _next_part(self) -> None:
        header = self._exactly(8, "header")
        if header is None:
            self.ended = True
            return
        magic, word = struct.unpack("<II", header)
        if magic != RECORDIO_MAGIC:
            raise JobError(f"{self.path}: RecordIO record {self.records} does not start with RecordIO's magic "
                           "number: the channel's RecordWrapperType is RecordIO but its stream is not RecordIO "
                           "(set RecordWrapperType to None for this channel)")
        flag, length = word >> RECORDIO_LENGTH_BITS, word & ((1 << RECORDIO_LENGTH_BITS) - 1)
        payload = self._exactly(length + (-length % 4), "payload")[:length]
        if flag in (2, 3):  # a later part of a split record: the magic number it was split at
            self.pending += RECORDIO_MAGIC_BYTES
        self.pending += payload
        if flag in (0, 3):  # the record is whole
            self.pending += self.separator
            self.records += 1

    def next_record(self) -> bytes | None:
        """The next record's payload, whole (None at the stream's end)."""
        before = self.records
        while self.records == before and not self.ended:
            self._next_part()
        if self.records == before:
            return None
        record, self.pending = bytes(self.pending), bytearray()
        return record

    def close(self) -> None:
        self.raw.close()
        super().close()


def tfrecord_chunks(path: str, records_per_chunk: int = RECORDS_PER_CHUNK, wait_sec: float | None = None,
                    recordio: bool = False):
    """Yield lists of serialized records from a TFRecord stream (CRCs are not checked);
    `recordio`: from the payloads of a stream of RecordIO records."""
    buffer = bytearray()
    offset = 0
    record_index = 0
    chunk = []
    with open_stream(path, wait_sec, recordio) as stream:
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
                raise JobError(_not_tfrecord(path, record_index, length, bytes(buffer[offset:offset + 4]), recordio))
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


def gzip_stream_error(path: str) -> str:
    return (f"{path}: the stream is gzip-compressed but the channel's CompressionType is None: set "
            "CompressionType=Gzip for this channel (SageMaker then streams it decompressed)")


def _not_tfrecord(path: str, record_index: int, length: int, first_bytes: bytes, recordio: bool) -> str:
    """Why a stream's record length is impossible: the channel setting its first bytes say
    is wrong (gzip's or RecordIO's magic number), else not TFRecord at all."""
    if record_index == 0 and first_bytes[:2] == GZIP_MAGIC_BYTES:
        return gzip_stream_error(path)
    if record_index == 0 and first_bytes == RECORDIO_MAGIC_BYTES and not recordio:
        return (f"{path}: the stream is RecordIO-wrapped (it starts with RecordIO's magic number) but the channel's "
                "RecordWrapperType is None: set RecordWrapperType=RecordIO for this channel, or send it unwrapped")
    return (f"{path}: record {record_index} has an impossible length {length}; the stream is not TFRecord (set "
            "data_format=libsvm or the channel's ContentType for text) or is corrupt")


def line_chunks(path: str, records_per_chunk: int = RECORDS_PER_CHUNK, wait_sec: float | None = None,
                recordio: bool = False):
    """Yield lists of non-empty text lines from a stream (`recordio`: from the payloads of a
    stream of RecordIO records, each ending its last line)."""
    chunk = []
    with open_stream(path, wait_sec, recordio, separator=b"\n") as raw, io.BufferedReader(raw, READ_SIZE) as stream:
        if stream.peek(2)[:2] == GZIP_MAGIC_BYTES:
            raise JobError(gzip_stream_error(path))
        for line in stream:
            line = line.strip()
            if line:
                chunk.append(line)
                if len(chunk) >= records_per_chunk:
                    yield chunk
                    chunk = []
    if chunk:
        yield chunk


def recordio_chunks(path: str, records_per_chunk: int = RECORDS_PER_CHUNK, wait_sec: float | None = None):
    """Yield lists of the payloads of a stream of RecordIO records, each payload one record."""
    chunk = []
    with open_stream(path, wait_sec, recordio=True) as records:
        while (record := records.next_record()) is not None:
            chunk.append(record)
            if len(chunk) >= records_per_chunk:
                yield chunk
                chunk = []
    if chunk:
        yield chunk


def record_chunks(path: str, data_format: str, wait_sec: float | None = None, recordio: bool = False):
    """The records of a stream in chunks, framed as `data_format` says (inside RecordIO
    records when `recordio`)."""
    chunks = tfrecord_chunks if data_format == "tfrecord" else line_chunks
    return chunks(path, wait_sec=wait_sec, recordio=recordio)


def fifo_blocks(path: str, data_format: str, wait_sec: float | None = None, recordio: bool = False):
    """A tf.data.Dataset of the serialized records streamed through the FIFO `path`, in
    blocks (1-D string tensors) as the pipeline takes them."""
    import tensorflow as tf

    return tf.data.Dataset.from_generator(
        lambda: record_chunks(path, data_format, wait_sec, recordio), output_signature=tf.TensorSpec([None], tf.string))

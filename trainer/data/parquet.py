"""Reading Parquet into the input pipeline: a row group at a time, as columns, with pyarrow.

A file is read by row group (`ParquetFile.iter_batches`: never a whole file or table in
memory, no pandas), only the columns the model trains on; the pipeline then shards its rows as
every format's (trainer.data.pipeline: row k of the stream to rank k % n), so the same rows
reach the same ranks in the same order whatever their format. In Pipe mode the channel's
objects arrive back to back on the FIFO: each is split off
where its footer ends (the footer's length and `PAR1`, where the next object's `PAR1` begins)
and read from memory, one object at a time; a gzip-compressed file the same way.

Rows leave as numpy arrays: the label and the numeric columns as float32 (NaN: missing), each
categorical column as its bytes in one buffer with every row's start and length, which the
graph cuts into strings (tf.strings.substr) and hashes (trainer.data.raw_features), so no
Python object is made per value.

TensorFlow calls the reader by name (a PyFunc op with a fixed token), not through
`Dataset.from_generator`, whose generator lives only in the process that built the dataset:
the same graph then also runs on a parameter-server worker and on a tf.data service worker,
where this module is imported and its functions registered (`register_readers`).
"""
from __future__ import annotations

import gzip
import itertools
import json
import threading
from dataclasses import dataclass

import numpy as np

from trainer.data.columns import ColumnMapping, ColumnSpec, resolve_columns
from trainer.data.fifo import GZIP_MAGIC_BYTES, READ_SIZE, gzip_stream_error, open_stream
from trainer.errors import JobError

ROWS_PER_CHUNK = 8192
OPEN_TOKEN = "trainer.parquet.open"
NEXT_TOKEN = "trainer.parquet.next"
MAGIC = b"PAR1"


def spec_to_json(spec: ColumnSpec) -> str:
    return json.dumps({"label": spec.label, "numeric": spec.numeric, "categorical": spec.categorical,
                       "transform": spec.transform})


def spec_from_json(text: str) -> ColumnSpec:
    values = json.loads(text)
    return ColumnSpec(*(tuple(values[role]) if values[role] is not None else None
                        for role in ("label", "numeric", "categorical")), transform=values["transform"])


def open_file(path: str):
    """A pyarrow ParquetFile of `path` (a .gz file decompressed into memory first)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        if path.lower().endswith(".gz"):
            with gzip.open(path, "rb") as f:
                return pq.ParquetFile(pa.BufferReader(f.read()))
        return pq.ParquetFile(path)
    except (OSError, EOFError, pa.ArrowException) as err:
        raise JobError(f"file {path}: not a readable Parquet file, truncated or corrupt ({err})") from None


def schema_names(path: str) -> tuple[str, ...]:
    return tuple(open_file(path).schema_arrow.names)


def objects_in_stream(stream, where: str):
    """The Parquet files streamed back to back through `stream` (bytes each): each ends where
    a footer's length and `PAR1` end, and the next begins with `PAR1` (or the stream ends)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer, scan_from, ended, count = bytearray(), 4, False, 0
    while True:
        if not ended and len(buffer) < scan_from + 8:
            data = stream.read(READ_SIZE)
            ended = not data
            buffer += data
            continue
        if not buffer and ended:
            return
        if buffer[:2] == GZIP_MAGIC_BYTES:
            raise JobError(gzip_stream_error(where))
        if buffer[:4] != MAGIC:
            raise JobError(f"{where}: Parquet object {count} does not start with Parquet's PAR1 magic (its first "
                           f"bytes: {bytes(buffer[:8])!r}): the channel's objects are not Parquet files")
        position = buffer.find(MAGIC, scan_from)
        if position < 0:
            if ended:
                raise JobError(f"{where}: the stream ends inside Parquet object {count} (truncated: no footer after "
                               f"{len(buffer)} bytes)")
            scan_from = max(4, len(buffer) - 3)
            continue
        end = position + 4
        if not ended and len(buffer) < end + 4:  # is the next object's magic right behind it?
            scan_from = position
            data = stream.read(READ_SIZE)
            ended = not data
            buffer += data
            continue
        if end == len(buffer) or buffer[end:end + 4] == MAGIC:
            footer = int.from_bytes(buffer[end - 8:end - 4], "little")
            if end - 8 - footer >= 4:
                candidate = bytes(buffer[:end])
                try:
                    pq.ParquetFile(pa.BufferReader(candidate))
                except (OSError, pa.ArrowException):
                    candidate = None
                if candidate is not None:
                    del buffer[:end]
                    scan_from, count = 4, count + 1
                    yield candidate
                    continue
        scan_from = position + 1


@dataclass
class Options:
    wait_sec: float | None = None  # a FIFO: how long to wait for it and its first bytes
    recordio: bool = False  # RecordWrapperType RecordIO: each object is one record's payload
    skip_bad: bool = False  # rows with a missing or unreadable label or number: marked (NaN label), not fatal
    rows: int = ROWS_PER_CHUNK


class Reader:
    """The rows of one file or stream, `rows` at a time, as arrays."""

    def __init__(self, source: str, kind: str, spec: ColumnSpec, options: Options):
        self.source, self.kind, self.spec, self.options = source, kind, spec, options
        self.bad_rows: set[int] = set()  # rows of the chunk being made with a number that is not one

    def files(self):
        """(where, ParquetFile) of each Parquet file in the source."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if self.kind == "file":
            yield f"file {self.source}", open_file(self.source)
            return
        stream = open_stream(self.source, self.options.wait_sec, self.options.recordio)
        with stream:
            if self.options.recordio:
                objects = iter(stream.next_record, None)
            else:
                objects = objects_in_stream(stream, self.source)
            for index, payload in enumerate(objects):
                where = f"{self.source} object {index}"
                try:
                    yield where, pq.ParquetFile(pa.BufferReader(payload))
                except (OSError, pa.ArrowException) as err:
                    raise JobError(f"{where}: not a readable Parquet file ({err})") from None

    def chunks(self):
        for where, parquet in self.files():
            yield from self.file_chunks(where, parquet)

    def file_chunks(self, where: str, parquet, groups=None):
        """A ParquetFile's rows (`groups`: of these row groups only), in chunks."""
        import pyarrow as pa

        names = tuple(parquet.schema_arrow.names)
        mapping = resolve_columns(self.spec, names, len(names), where)
        columns = [mapping.label.name] + [c.name for c in mapping.features]
        starts = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows
                                  for g in range(parquet.metadata.num_row_groups)])
        for group in range(parquet.metadata.num_row_groups) if groups is None else groups:
            position = int(starts[group])
            try:
                for batch in parquet.iter_batches(batch_size=self.options.rows, row_groups=[group],
                                                  columns=columns, use_threads=False):
                    yield self._marked(self._arrays(batch, mapping, f"{where} row group {group}", position))
                    position += batch.num_rows
            except (OSError, pa.ArrowException) as err:
                raise JobError(f"{where}: row group {group} is truncated or corrupt ({err})") from None

    def _arrays(self, batch, mapping: ColumnMapping, where: str, first_row: int):
        label = self._numbers(batch.column(0), mapping.label.name, where, first_row, label=True)
        count = len(mapping.numeric)
        numeric = np.stack([self._numbers(batch.column(1 + i), c.name, where, first_row)
                            for i, c in enumerate(mapping.numeric)], axis=1) if count else \
            np.zeros((batch.num_rows, 0), np.float32)
        blobs, starts, lengths = [], [], []
        for j, column in enumerate(mapping.categorical):
            blob, start, length = string_parts(batch.column(1 + count + j), column.name, where)
            blobs.append(blob)
            starts.append(start)
            lengths.append(length)
        shape = (batch.num_rows, len(blobs))
        return (label, numeric, np.array(blobs, dtype=object),
                np.stack(starts, axis=1) if blobs else np.zeros(shape, np.int64),
                np.stack(lengths, axis=1) if blobs else np.zeros(shape, np.int64))

    def _numbers(self, array, name: str, where: str, first_row: int, label: bool = False) -> np.ndarray:
        """A column as float32, NaN where missing; a label must be there (else: a bad row)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if pa.types.is_string(array.type) or pa.types.is_large_string(array.type):
            array = pc.if_else(pc.equal(pc.utf8_trim_whitespace(array), ""), pa.scalar(None, array.type), array)
            try:
                values = pc.cast(array, pa.float32())
            except pa.ArrowInvalid:
                values = self._bad_numbers(array, name, where, first_row)
        elif pa.types.is_dictionary(array.type):
            return self._numbers(array.dictionary_decode(), name, where, first_row, label)
        elif (pa.types.is_integer(array.type) or pa.types.is_floating(array.type) or pa.types.is_boolean(array.type)
              or pa.types.is_decimal(array.type)):
            values = pc.cast(array, pa.float32(), safe=False)
        else:
            raise JobError(f"{where}: column {name} is {array.type}, not a number")
        numbers = values.to_numpy(zero_copy_only=False).astype(np.float32, copy=False)
        if label and not self.options.skip_bad and np.isnan(numbers).any():  # (skipping: NaN marks the row)
            row = int(np.flatnonzero(np.isnan(numbers))[0])
            raise JobError(f"{where}: row {first_row + row} has no label (column {name} is missing); "
                           "set skip_bad_records=true to skip such rows")
        return numbers

    def _bad_numbers(self, array, name: str, where: str, first_row: int):
        """A text column with a value that is not a number: fail naming it, or (skip_bad) mark the row."""
        import pyarrow as pa

        values = array.to_pylist()
        numbers = np.full(len(values), np.nan, np.float32)
        for row, text in enumerate(values):
            if text is None:
                continue
            try:
                numbers[row] = float(text)
            except ValueError:
                if not self.options.skip_bad:
                    raise JobError(f"{where}: row {first_row + row}: column {name} value {text!r} is not a number") \
                        from None
                self.bad_rows.add(row)
        return pa.array(numbers)

    def _marked(self, arrays):
        """The bad rows of a chunk marked with a NaN label (skip_bad_records drops them in the graph)."""
        if self.bad_rows:
            label = arrays[0].copy()
            label[sorted(self.bad_rows)] = np.nan
            self.bad_rows = set()
            return (label,) + arrays[1:]
        return arrays


def string_parts(array, name: str, where: str):
    """A column as (its bytes, each row's start, each row's length): strings for the graph to
    cut out. Missing values are empty; numbers and booleans are their text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_dictionary(array.type):
        blob, starts, lengths = string_parts(array.dictionary, name, where)
        indices = pc.fill_null(array.indices, 0).to_numpy(zero_copy_only=False).astype(np.int64)
        starts, lengths = starts[indices], lengths[indices]
        if array.null_count:
            lengths[array.is_null().to_numpy(zero_copy_only=False)] = 0
        return blob, starts, lengths
    if pa.types.is_integer(array.type) or pa.types.is_boolean(array.type) or pa.types.is_floating(array.type):
        array = pc.cast(array, pa.string())
    if pa.types.is_string(array.type) or pa.types.is_binary(array.type):
        offset_type = np.int32
    elif pa.types.is_large_string(array.type) or pa.types.is_large_binary(array.type):
        offset_type = np.int64
    else:
        raise JobError(f"{where}: categorical column {name} is {array.type}, not text or integers")
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], dtype=offset_type)[array.offset:array.offset + len(array) + 1].astype(np.int64) \
        if len(array) else np.zeros(1, np.int64)
    data = buffers[2]
    blob = data[offsets[0]:offsets[-1]].to_pybytes() if data is not None and offsets[-1] > offsets[0] else b""
    starts, lengths = offsets[:-1] - offsets[0], np.diff(offsets)
    if array.null_count:
        lengths[array.is_null().to_numpy(zero_copy_only=False)] = 0
    return blob, starts, lengths


# The readers of this process by handle: opened when a pass over a file or stream starts,
# dropped at its end.
_READERS: dict[int, object] = {}
_HANDLES = itertools.count(1)
_LOCK = threading.Lock()
# A parameter-server worker's FIFO paths by channel and pass (trainer.data.ps_worker_input).
FIFO_OF_CHANNEL: dict = {}


def _open(source: bytes, kind: bytes, spec: bytes, options: bytes):
    source, kind = source.decode(), kind.decode()
    settings = Options(**json.loads(options.decode()))
    if kind == "channel":  # a parameter-server worker's own FIFO: "<channel>:<pass>"
        name, _, pass_index = source.rpartition(":")
        source, kind = FIFO_OF_CHANNEL["path"](name, int(pass_index)), "stream"
    reader = Reader(source, kind, spec_from_json(spec.decode()), settings)
    with _LOCK:
        handle = next(_HANDLES)
        _READERS[handle] = (reader, reader.chunks())
    return np.int64(handle)


def _next(handle):
    with _LOCK:
        reader, chunks = _READERS[int(handle)]
    arrays = next(chunks, None)
    if arrays is None:
        with _LOCK:
            _READERS.pop(int(handle), None)
        numeric, categorical = reader.spec.counts()
        return (np.zeros(0, np.float32), np.zeros((0, numeric), np.float32), np.array([b""] * categorical, object),
                np.zeros((0, categorical), np.int64), np.zeros((0, categorical), np.int64))
    return arrays


_FUNCTIONS = {OPEN_TOKEN: _open, NEXT_TOKEN: _next}  # the PyFunc registry holds weak references


def register_readers() -> None:
    """Make the reader callable by name in this process (trainer, PS worker, data worker)."""
    from tensorflow.python.ops import script_ops  # the registry PyFunc ops look names up in

    for token, function in _FUNCTIONS.items():
        script_ops._py_funcs._funcs[token] = function


def blocks(source, kind: str, spec: ColumnSpec, options: Options):
    """A tf.data.Dataset of Columns blocks (trainer.data.raw_features) of one file or stream:
    `source` a path (kind file or stream; a tensor in a file's interleave) or "<channel>:<pass>"
    (kind channel, on a parameter-server worker)."""
    import tensorflow as tf

    register_readers()
    numeric, categorical = spec.counts()
    arguments = [tf.convert_to_tensor(source, tf.string), tf.constant(kind), tf.constant(spec_to_json(spec)),
                 tf.constant(json.dumps(options.__dict__))]

    def opened(_):
        return tf.raw_ops.PyFunc(input=arguments, token=OPEN_TOKEN, Tout=[tf.int64])[0]

    def next_chunk(handle):
        label, numbers, blobs, starts, lengths = tf.raw_ops.PyFunc(
            input=[handle], token=NEXT_TOKEN, Tout=[tf.float32, tf.float32, tf.string, tf.int64, tf.int64])
        return {"label": tf.ensure_shape(label, [None]), "numeric": tf.ensure_shape(numbers, [None, numeric]),
                "categorical": tf.strings.substr(tf.ensure_shape(blobs, [categorical]),
                                                 tf.ensure_shape(starts, [None, categorical]),
                                                 tf.ensure_shape(lengths, [None, categorical]))}

    def chunks(handle):
        return tf.data.Dataset.from_tensors(handle).repeat().map(next_chunk).take_while(
            lambda columns: tf.size(columns["label"]) > 0)

    return tf.data.Dataset.from_tensors(0).map(opened).flat_map(chunks)

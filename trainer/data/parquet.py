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

ROWS_PER_CHUNK = 8192  # a multiple of the pipeline's blocks (trainer.data.pipeline.READ_BLOCK_RECORDS)
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


def source_of(path: str):
    """What pyarrow reads a file from: its path, or (a .gz file) its bytes decompressed in memory."""
    import pyarrow as pa

    if not path.lower().endswith(".gz"):
        return path
    try:
        with gzip.open(path, "rb") as f:
            return pa.BufferReader(f.read())
    except (OSError, EOFError) as err:
        raise JobError(f"file {path}: not a readable Parquet file, truncated or corrupt ({err})") from None


def open_parquet(source, where: str):
    """A pyarrow ParquetFile of a path or a buffer, or an error naming `where`."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:  # no pre-buffering: it reads every row group a pass will read into memory up front
        return pq.ParquetFile(source, pre_buffer=False)
    except (OSError, EOFError, pa.ArrowException) as err:
        raise JobError(f"{where}: not a readable Parquet file, truncated or corrupt ({err})") from None


def open_file(path: str):
    return open_parquet(source_of(path), f"file {path}")


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
        """(where, source) of each Parquet file in the source: a path, or an object's bytes."""
        import pyarrow as pa

        if self.kind == "file":
            yield f"file {self.source}", source_of(self.source)
            return
        stream = open_stream(self.source, self.options.wait_sec, self.options.recordio)
        with stream:
            objects = iter(stream.next_record, None) if self.options.recordio else objects_in_stream(stream, self.source)
            for index, payload in enumerate(objects):
                yield f"{self.source} object {index}", pa.BufferReader(payload)

    def chunks(self):
        for where, source in self.files():
            yield from self.file_chunks(where, source)

    def file_chunks(self, where: str, source, groups=None):
        """A Parquet file's rows (`groups`: of these row groups only), in chunks of `rows` rows
        from its first (the last shorter), across its row groups. (Not read as Arrow
        dictionaries: pyarrow's grow through a file, and a chunk would carry them whole.)"""
        import pyarrow as pa

        parquet = open_parquet(source, where)
        schema = parquet.schema_arrow
        mapping = resolve_columns(self.spec, tuple(schema.names), len(schema.names), where)
        columns = [mapping.label.name] + [c.name for c in mapping.features]
        groups = list(range(parquet.metadata.num_row_groups)) if groups is None else list(groups)
        firsts = np.cumsum([0] + [parquet.metadata.row_group(g).num_rows for g in groups])  # of the rows read
        position = 0
        try:
            for batch in parquet.iter_batches(batch_size=self.options.rows, row_groups=groups, columns=columns,
                                              use_threads=False):
                group = groups[int(np.searchsorted(firsts, position, side="right")) - 1]
                yield self._marked(self._arrays(batch, mapping, f"{where} row group {group}", position))
                position += batch.num_rows
        except (OSError, pa.ArrowException) as err:  # pyarrow reads ahead: somewhere after the rows read
            raise JobError(f"{where}: truncated or corrupt after row {position} ({err})") from None

    def _arrays(self, batch, mapping: ColumnMapping, where: str, first_row: int):
        """A batch as the arrays the graph takes: the label, the numbers, and the categorical
        columns' distinct values (their bytes a column, each value's start and length, where
        each column's values begin) and each row's value of each column."""
        label = self._numbers(batch.column(0), mapping.label.name, where, first_row, label=True)
        count = len(mapping.numeric)
        numeric = np.stack([self._numbers(batch.column(1 + i), c.name, where, first_row)
                            for i, c in enumerate(mapping.numeric)], axis=1) if count else \
            np.zeros((batch.num_rows, 0), np.float32)
        parts = [dictionary_parts(batch.column(1 + count + j), c.name, where) for j, c in enumerate(mapping.categorical)]
        splits = np.cumsum([0] + [len(starts) for _, starts, _, _ in parts])
        return (label, numeric, np.array([blob for blob, *_ in parts], dtype=object),
                np.concatenate([starts for _, starts, _, _ in parts] or [np.zeros(0, np.int64)]),
                np.concatenate([lengths for _, _, lengths, _ in parts] or [np.zeros(0, np.int64)]),
                splits.astype(np.int64),
                np.stack([rows for *_, rows in parts], axis=1) if parts else np.zeros((batch.num_rows, 0), np.int32))

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


def dictionary_parts(array, name: str, where: str):
    """A categorical column of a chunk as (its distinct values' bytes, each value's start, each
    value's length, each row's value), Arrow's dictionary encoding of the chunk: the graph cuts
    each distinct value out and hashes it once (trainer.data.raw_features), however many rows
    hold it. A missing value is the last value, empty; numbers and booleans are their text."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not pa.types.is_dictionary(array.type):
        if pa.types.is_integer(array.type) or pa.types.is_boolean(array.type) or pa.types.is_floating(array.type):
            array = pc.cast(array, pa.string())
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)
                or pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)):
            raise JobError(f"{where}: categorical column {name} is {array.type}, not text or integers")
        array = pc.dictionary_encode(array)
    values = array.dictionary
    if not (pa.types.is_string(values.type) or pa.types.is_binary(values.type)):
        values = pc.cast(values, pa.large_string() if pa.types.is_large_binary(values.type) else pa.string())
    offsets = np.frombuffer(values.buffers()[1], dtype=np.int64 if pa.types.is_large_string(values.type) else np.int32)
    offsets = offsets[values.offset:values.offset + len(values) + 1].astype(np.int64) if len(values) else np.zeros(
        1, np.int64)
    data = values.buffers()[2]
    blob = data[offsets[0]:offsets[-1]].to_pybytes() if data is not None and offsets[-1] > offsets[0] else b""
    starts = np.append(offsets[:-1] - offsets[0], 0)  # and the missing value's
    lengths = np.append(np.diff(offsets), 0)
    rows = pc.fill_null(array.indices, len(values)).to_numpy(zero_copy_only=False).astype(np.int32)
    return blob, starts, lengths, rows


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
                np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(categorical + 1, np.int64),
                np.zeros((0, categorical), np.int32))
    return arrays


_FUNCTIONS = {OPEN_TOKEN: _open, NEXT_TOKEN: _next}  # the PyFunc registry holds weak references


def register_readers() -> None:
    """Make the reader callable by name in this process (trainer, PS worker, data worker)."""
    from tensorflow.python.ops import script_ops  # the registry PyFunc ops look names up in

    for token, function in _FUNCTIONS.items():
        script_ops._py_funcs._funcs[token] = function


ARRAY_TYPES = ("float32", "float32", "string", "int64", "int64", "int64", "int32")  # _arrays', as TensorFlow's


def chunk_columns(arrays, categorical: int, hash_into: tuple[int, int] | None = None) -> dict:
    """A chunk's arrays (tensors: Reader._arrays) as Columns: each categorical column's values
    cut out of its bytes once, and, with `hash_into` (buckets, first id), hashed once there too,
    as `categorical_ids` (trainer.data.raw_features.hash_column: the ids every format gets), else
    as strings a row."""
    import tensorflow as tf

    from trainer.data.raw_features import hash_column

    label, numeric, blobs, starts, lengths, splits, rows = arrays
    columns = []
    for j in range(categorical):
        values = tf.strings.substr(blobs[j], starts[splits[j]:splits[j + 1]], lengths[splits[j]:splits[j + 1]])
        if hash_into:
            values = hash_column(values, j, *hash_into)
        columns.append(tf.gather(values, rows[:, j]))
    key = "categorical_ids" if hash_into else "categorical"
    empty = tf.zeros([tf.shape(label)[0], 0], tf.int64 if hash_into else tf.string)
    return {"label": label, "numeric": numeric, key: tf.stack(columns, axis=1) if columns else empty}


def blocks(source, kind: str, spec: ColumnSpec, options: Options, hash_into: tuple[int, int] | None = None):
    """A tf.data.Dataset of Columns blocks (trainer.data.raw_features) of one file or stream:
    `source` a path (kind file or stream; a tensor in a file's interleave) or "<channel>:<pass>"
    (kind channel, on a parameter-server worker); `hash_into`: as chunk_columns."""
    import tensorflow as tf

    register_readers()
    numeric, categorical = spec.counts()
    arguments = [tf.convert_to_tensor(source, tf.string), tf.constant(kind), tf.constant(spec_to_json(spec)),
                 tf.constant(json.dumps(options.__dict__))]
    shapes = ([None], [None, numeric], [categorical], [None], [None], [categorical + 1], [None, categorical])

    def opened(_):
        return tf.raw_ops.PyFunc(input=arguments, token=OPEN_TOKEN, Tout=[tf.int64])[0]

    def next_chunk(handle):
        arrays = tf.raw_ops.PyFunc(input=[handle], token=NEXT_TOKEN, Tout=[tf.as_dtype(t) for t in ARRAY_TYPES])
        return chunk_columns([tf.ensure_shape(a, shape) for a, shape in zip(arrays, shapes)], categorical, hash_into)

    def chunks(handle):
        return tf.data.Dataset.from_tensors(handle).repeat().map(next_chunk).take_while(
            lambda columns: tf.size(columns["label"]) > 0)

    return tf.data.Dataset.from_tensors(0).map(opened).flat_map(chunks)

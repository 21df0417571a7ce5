"""Turn TensorFlow's input errors into messages that name the file and line.

TensorFlow reports a bad libsvm token or a truncated TFRecord without saying which file
it was in. Checking every record up front would cost a full extra read of the data on
every run, so the files are scanned only after an input error, to find the first bad
record and say where it is.
"""
from __future__ import annotations

import csv
import gzip
import os
import re
import zlib

from trainer.data.formats import NAMES, is_header_row, is_number
from trainer.data.pipeline import InputSpec
from trainer.data.records import parse_libsvm_line
from trainer.errors import JobError

_JOB_ERROR_IN_TF = re.compile(r"JobError: (.+)")
_ID_OUT_OF_RANGE = re.compile(r"indices\[[^\]]*\] = (-?\d+) is not in \[0, (\d+)\)")


def job_error_inside(tf_error: Exception) -> JobError | None:
    """A JobError raised inside a tf.data generator reaches us wrapped in a TF error; one an
    Assert raised comes quoted, in brackets in a graph ([JobError: the channel\\'s ...]), as
    bytes where it ran eagerly (b"JobError: the channel's ...")."""
    message = str(tf_error)
    match = _JOB_ERROR_IN_TF.search(message)
    if not match:
        return None
    text = match.group(1).strip()
    if match.start() and message[match.start() - 1] in "[\"'":
        text = text.removesuffix("]").rstrip("\"'").replace("\\'", "'")
    return JobError(text)


def find_bad_record(spec: InputSpec, field_size: int, feature_size: int) -> JobError | None:
    """The first bad record of a File-mode channel, or None if every record is fine (a
    Parquet reader names its own: trainer.data.parquet)."""
    if spec.is_parquet:
        return None
    for path in spec.files:
        compression = spec.compression_of(path)
        try:
            if spec.columns is not None:
                problem = _scan_table(path, spec, compression)
            else:
                problem = (_scan_libsvm if spec.data_format == "libsvm" else _scan_tfrecord)(
                    path, field_size, feature_size, compression)
        except (EOFError, gzip.BadGzipFile, zlib.error) as err:  # Python's gzip reader on a damaged file
            problem = f"file {path}: gzip-compressed, but cut short or damaged ({err}); the lines before it were read"
        if problem:
            return JobError(f"channel '{spec.name}': {problem}")
    return None


def _scan_table(path: str, spec: InputSpec, compression: str = "") -> str | None:
    """The first row of a CSV or TSV file that the mapping cannot read: another width, a
    label or a numeric value that is not a number, a header unlike the first file's."""
    mapping = spec.columns
    numeric = {c.position: c.name for c in mapping.numeric}
    names = {c.position: c.name for c in mapping.features}
    names[mapping.label.position] = mapping.label.name
    opener = gzip.open if compression == "GZIP" else open
    what = NAMES[spec.data_format]
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as f:
        header = None
        for number, fields in enumerate(csv.reader(f, delimiter=spec.delimiter), start=1):
            if not fields or not "".join(fields).strip():
                continue
            label = fields[mapping.label.position].strip() if mapping.label.position < len(fields) else ""
            if number == 1 and is_header_row(fields, mapping.label.position, spec.header):
                header = fields
                line = spec.delimiter.join(fields)
                if spec.header_line and fields != next(csv.reader([spec.header_line], delimiter=spec.delimiter)):
                    return (f"file {path} line 1: its header ({line[:200]}) is not the channel's first file's "
                            f"({spec.header_line[:200]}), by which its columns were found")
                continue
            if fields == header:
                continue
            if len(fields) != mapping.width:
                return (f"file {path} line {number}: {len(fields)} columns, where the {what} rows have "
                        f"{mapping.width} ({_first_names(mapping)})")
            if not label:
                return f"file {path} line {number}: no label (column {mapping.label.name} is empty)"
            if not is_number(label):
                return f"file {path} line {number}: label {label!r} (column {mapping.label.name}) is not a number"
            for position, name in numeric.items():
                value = fields[position].strip()
                if value and not is_number(value):
                    return f"file {path} line {number}: column {name} value {value!r} is not a number"
    return None


def _first_names(mapping) -> str:
    names = [mapping.label.name] + [c.name for c in mapping.features]
    return ", ".join(names[:4]) + (", ..." if len(names) > 4 else "")


_TABLE_ERRORS = (
    (re.compile(r"Expect (\d+) fields but have (\d+) in record"),
     lambda m, names: f"a row has {m[2]} columns where {m[1]} are expected"),
    (re.compile(r"Field (\d+) in record \d+ is not a valid float: ?(.*)"),
     lambda m, names: f"column {names.get(int(m[1]), m[1])} value {m[2].strip()!r} is not a number"),
    (re.compile(r"Field (\d+) is required but missing in record"),
     lambda m, names: f"a row has no label (column {names.get(int(m[1]), m[1])} is empty)"),
)


def _table_error(tf_error: Exception, spec: InputSpec) -> JobError | None:
    """A CSV or TSV decoding error in words, naming the channel and the column (Pipe mode: no
    file to scan afterwards for the line)."""
    names = {c.position: c.name for c in spec.columns.features}
    names[spec.columns.label.position] = spec.columns.label.name
    for pattern, say in _TABLE_ERRORS:
        match = pattern.search(str(tf_error))
        if match:
            where = f"channel '{spec.name}' ({spec.channels[0].input_mode} mode, {NAMES[spec.data_format]})"
            return JobError(f"{where}: {say(match, names)} (set skip_bad_records=true to skip such rows)")
    return None


def _scan_libsvm(path: str, field_size: int, feature_size: int, compression: str = "") -> str | None:
    opener = gzip.open if compression == "GZIP" else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                parse_libsvm_line(line, field_size, feature_size)
            except ValueError as err:
                return f"file {path} line {number}: {err}"
    return None


RECORD_FRAMING = 16  # a TFRecord's bytes besides its data: length (8), its CRC (4), the data's CRC (4)


def _scan_tfrecord(path: str, field_size: int, feature_size: int, compression: str = "") -> str | None:
    import numpy as np
    import tensorflow as tf

    from trainer.data.records import batch_parser

    parse = batch_parser("tfrecord", field_size)
    index = framed = 0  # records read, and the bytes their framing accounts for
    try:
        for batch in tf.data.TFRecordDataset(path, compression_type=compression).batch(4096):
            framed += int(tf.reduce_sum(tf.strings.length(batch)).numpy()) + RECORD_FRAMING * len(batch)
            try:
                features, _ = parse(batch)
            except tf.errors.InvalidArgumentError as err:
                return (f"file {path}: a record among records {index}..{index + len(batch) - 1} "
                        f"does not have the layout ids int64[{field_size}], values float[{field_size}], "
                        f"label float[1]: {tf_reason(err)}")
            ids = features["ids"].numpy()
            bad = np.argwhere((ids < 0) | (ids >= feature_size))
            if len(bad):
                row, column = bad[0]
                return (f"file {path} record {index + row}: id {ids[row, column]} is outside "
                        f"[0, feature_size={feature_size})")
            index += len(batch)
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError) as err:
        readable = index + _count_readable(tf.data.TFRecordDataset(path, compression_type=compression).skip(index))
        return f"file {path} is truncated or corrupt after record {readable}: {tf_reason(err)}"
    size = os.path.getsize(path)
    if not compression and framed < size:  # TensorFlow reads a record header cut short as the file's end
        return (f"file {path} is truncated after record {index}: its last {size - framed} bytes are "
                "the start of a record cut short")
    return None


def _count_readable(dataset) -> int:
    """Records read before the dataset's error (which the caller reports)."""
    import tensorflow as tf

    count = 0
    try:
        for _ in dataset:
            count += 1
    except tf.errors.OpError:
        pass
    return count


def tf_reason(err) -> str:
    """TensorFlow's message without its graph-node prefix and op suffix."""
    text = re.sub(r"\{\{[^}]*\}\}\s*", "", err.message.splitlines()[0])
    return re.sub(r"\s*\[Op:.*$", "", text).strip()


def explain(tf_error: Exception, specs: list[InputSpec], field_size: int, feature_size: int,
            built_in_parse: bool = True) -> JobError | None:
    """A JobError naming where an input error comes from, or None if it is not one
    (`built_in_parse`: the built-in parsers read the records, whose errors are found in the files)."""
    inner = job_error_inside(tf_error)
    if inner:  # a reader's (Parquet's), which knows the file: the channel named too
        channel = next((spec.name for spec in specs if any(str(inner).startswith(f"file {path}")
                                                           for path in spec.files)), None)
        return JobError(f"channel '{channel}': {inner}") if channel else inner
    if not built_in_parse:
        return None
    for spec in specs:
        if not spec.is_pipe:
            found = find_bad_record(spec, field_size, feature_size)
            if found:
                return found
    for spec in specs:
        if spec.columns is not None and not spec.is_parquet:
            found = _table_error(tf_error, spec)
            if found:
                return found
    match = _ID_OUT_OF_RANGE.search(str(tf_error))
    if match:
        channels = ", ".join(f"'{s.name}'" for s in specs)
        return JobError(f"channel {channels}: id {match.group(1)} is outside [0, feature_size="
                        f"{match.group(2)}); set feature_size above the largest id")
    return None

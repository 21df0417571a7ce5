"""`trainer convert`: any format the built-in model trains on, to TFRecord (or libsvm), in parallel.

    trainer convert day_0.tsv.gz --output data/ --target-mb 100
    trainer convert part-0.parquet part-1.parquet --output data/ --num-files 8 --channels 4
    trainer convert day_0.libsvm --output data/ --output-format tfrecord

CSV, TSV and Parquet rows become the very features training makes of them (the same
columns, numeric transform and hashing, in the same TensorFlow graph:
trainer.data.raw_features), so a model trained on the output is the model trained on the
rows; the column options are the hyperparameters' (label_column, numeric_columns,
categorical_columns, numeric_transform, feature_size). Text inputs are cut into byte ranges
on line boundaries, Parquet inputs into runs of row groups, one per output file, converted by
a pool of processes. A gzip-compressed text input (`day_0.tsv.gz`) is decompressed first, into
a temporary folder beside the output: byte ranges need a file that can be read from any
offset. `--channels K` spreads the output files round robin over K folders (training-1 ..
training-K), one per Pipe-mode channel.
"""
from __future__ import annotations

import argparse
import contextlib
import gzip
import math
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass, field

from trainer.contract.hyperparameters import SPEC_BY_NAME
from trainer.data import formats, pools, records
from trainer.data.columns import ColumnMapping, ColumnSpec, parse_refs
from trainer.errors import JobError

SAMPLE_LINES = 200
ROWS_PER_BATCH = 4096


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", help="CSV, TSV, Parquet or libsvm files (text may be gzip-compressed: .gz)")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--input-format", choices=("auto",) + formats.FORMATS[1:], default="auto",
                        help="auto: by the files' names, else their content (trainer.data.formats)")
    parser.add_argument("--output-format", choices=("tfrecord", "libsvm"), default="tfrecord")
    parser.add_argument("--field-size", type=int, default=SPEC_BY_NAME["field_size"].default,
                        help="fields per libsvm line (a table's follow from its columns)")
    parser.add_argument("--feature-size", type=int, default=SPEC_BY_NAME["feature_size"].default,
                        help="a table's ids: its numeric fields', then each categorical column's hash buckets")
    for name in ("label_column", "numeric_columns", "categorical_columns"):
        parser.add_argument("--" + name.replace("_", "-"), default=None, help=SPEC_BY_NAME[name].help)
    parser.add_argument("--numeric-transform", choices=SPEC_BY_NAME["numeric_transform"].choices,
                        default=SPEC_BY_NAME["numeric_transform"].default)
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--num-files", type=int, help="number of output files")
    size.add_argument("--target-mb", type=float, default=100.0, help="approximate size of each output file")
    parser.add_argument("--channels", type=int, default=1, help="spread the files over this many channel folders")
    parser.add_argument("--channel-prefix", default="training", help="channel folder name prefix")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="parallel processes")


@dataclass(frozen=True)
class Table:
    """A table's format and columns, as training reads them."""

    data_format: str
    columns: ColumnMapping
    column_spec: ColumnSpec
    feature_size: int
    header_line: str = ""
    header: bool | None = None


@dataclass(frozen=True)
class Task:
    segments: tuple  # ((path, start_byte, end_byte), ...) of text; ((path, (group, ...)), ...) of Parquet
    output: str
    input_format: str
    output_format: str
    field_size: int
    table: Table | None = None
    shown_as: dict = field(default_factory=dict)  # a decompressed input's path -> the file the user named


def _lines(path: str, start: int, end: int):
    """(byte offset, line) of the lines that start in [start, end)."""
    with open(path, "rb") as f:
        if start:
            f.seek(start - 1)
            f.readline()  # finish the line that started before `start`
        position = f.tell()
        while position < end:
            line = f.readline()
            if not line:
                return
            yield position, line
            position += len(line)


def _line_number(path: str, offset: int) -> int:
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


def convert_task(task: Task) -> int:
    """Convert one output file's byte ranges or row groups; returns the records written."""
    with records.RecordWriter(task.output, task.output_format) as writer:
        if task.table is None:
            return _libsvm_rows(task, writer)
        if task.input_format == "parquet":
            return _parquet_rows(task, writer)
        return _table_rows(task, writer)


def _libsvm_rows(task: Task, writer) -> int:
    count = 0
    for path, start, end in task.segments:
        for offset, raw in _lines(path, start, end):
            line = raw.decode("utf-8", errors="replace")
            if not line.strip():
                continue
            try:
                row = records.parse_libsvm_line(line, task.field_size)
            except ValueError as err:
                raise JobError(f"file {task.shown_as.get(path, path)} line {_line_number(path, offset)}: "
                               f"{err}") from None
            writer.write(*row)
            count += 1
    return count


def _write_features(writer, features, labels) -> int:
    ids, values, labels = features["ids"].numpy(), features["values"].numpy(), labels.numpy()[:, 0]
    for row in zip(labels, ids, values):
        writer.write(*row)
    return len(labels)


def _table_rows(task: Task, writer) -> int:
    """CSV or TSV rows through training's decode and features, a batch of lines at a time; a
    line that cannot be decoded is found and named (file, line)."""
    import tensorflow as tf

    from trainer.data.raw_features import decode_table, features_of

    table = task.table
    delimiter = formats.DELIMITERS[task.input_format]
    convert_batch = tf.function(lambda lines: features_of(decode_table(lines, table.columns, delimiter),
                                                          table.columns, table.feature_size))
    count = 0
    for path, start, end in task.segments:
        batch, offsets = [], []
        for offset, raw in _lines(path, start, end):
            line = raw.decode("utf-8", errors="replace").rstrip("\r\n")
            if not line.strip() or (table.header_line and line == table.header_line) or (
                    offset == 0 and _first_line_is_header(line, table, delimiter)):
                continue
            batch.append(line)
            offsets.append(offset)
            if len(batch) == ROWS_PER_BATCH:
                count += _convert_lines(convert_batch, batch, offsets, path, task, writer)
                batch, offsets = [], []
        if batch:
            count += _convert_lines(convert_batch, batch, offsets, path, task, writer)
    return count


def _first_line_is_header(line: str, table: Table, delimiter: str) -> bool:
    import csv

    fields = next(csv.reader([line], delimiter=delimiter), [])
    return formats.is_header_row(fields, table.columns.label.position, table.header)


def _convert_lines(convert_batch, lines, offsets, path, task, writer) -> int:
    import tensorflow as tf

    from trainer.data import diagnose

    try:
        return _write_features(writer, *convert_batch(tf.constant(lines)))
    except tf.errors.InvalidArgumentError as err:
        for line, offset in zip(lines, offsets):
            try:
                convert_batch(tf.constant([line]))
            except tf.errors.InvalidArgumentError as row_error:
                reason = diagnose.tf_reason(row_error)
                raise JobError(f"file {task.shown_as.get(path, path)} line {_line_number(path, offset)}: "
                               f"{reason}") from None
        raise JobError(f"file {task.shown_as.get(path, path)}: {diagnose.tf_reason(err)}") from None


def _parquet_rows(task: Task, writer) -> int:
    import tensorflow as tf

    from trainer.data import parquet
    from trainer.data.raw_features import features_of, hash_into

    table = task.table
    reader = parquet.Reader("", "file", table.column_spec, parquet.Options())
    hashed = hash_into(table.columns, table.feature_size)
    count = 0
    for path, groups in task.segments:
        for arrays in reader.file_chunks(f"file {path}", parquet.source_of(path), groups):
            tensors = [tf.constant(array, dtype) for array, dtype in zip(arrays, parquet.ARRAY_TYPES)]
            columns = parquet.chunk_columns(tensors, len(table.columns.categorical), hashed)
            count += _write_features(writer, *features_of(columns, table.columns, table.feature_size))
    return count


def plan_segments(inputs: list[str], parts: int) -> list[tuple]:
    """Cut the concatenated inputs into `parts` byte ranges of about equal size."""
    sizes = [os.path.getsize(p) for p in inputs]
    total = sum(sizes)
    bounds = [round(total * i / parts) for i in range(parts + 1)]
    result = []
    for part in range(parts):
        low, high = bounds[part], bounds[part + 1]
        segments, offset = [], 0
        for path, size in zip(inputs, sizes):
            start, end = max(low - offset, 0), min(high - offset, size)
            if start < end:
                segments.append((path, start, end))
            offset += size
        result.append(tuple(segments))
    return result


def _rows_estimate(inputs: list[str], data_format: str) -> int:
    """About how many rows the inputs hold: Parquet's footers say; text, from its first lines."""
    if data_format == "parquet":
        from trainer.data.parquet import open_file

        return sum(open_file(path).metadata.num_rows for path in inputs)
    with open(inputs[0], "rb") as f:
        sample = [line for _, line in zip(range(SAMPLE_LINES), f)]
    per_line = sum(map(len, sample)) / max(1, len(sample))
    return math.ceil(sum(os.path.getsize(p) for p in inputs) / max(per_line, 1.0))


def output_paths(output: str, parts: int, channels: int, prefix: str, suffix: str) -> list[str]:
    if channels <= 1:
        return [os.path.join(output, f"part-{p:05d}{suffix}") for p in range(parts)]
    return [os.path.join(output, f"{prefix}-{p % channels + 1}", f"part-{p:05d}{suffix}") for p in range(parts)]


@contextlib.contextmanager
def decompressed(inputs: list[str], output: str):
    """(paths, shown_as): the inputs, each gzip-compressed one decompressed into a temporary
    folder in `output` (removed afterwards), and which file each decompressed path stands for."""
    compressed = [path for path in inputs if formats.is_gzip_path(path)]
    if not compressed:
        yield list(inputs), {}
        return
    os.makedirs(output, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".decompressed-", dir=output) as folder:
        plain_of = {}
        for index, path in enumerate(compressed):
            plain_of[path] = os.path.join(folder, f"{index}-{os.path.basename(path)[:-len(formats.GZIP_SUFFIX)]}")
            try:
                with gzip.open(path, "rb") as source, open(plain_of[path], "wb") as target:
                    shutil.copyfileobj(source, target, 1 << 20)
            except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
                raise JobError(f"file {path}: not readable as gzip ({err})") from None
        yield [plain_of.get(path, path) for path in inputs], {plain: path for path, plain in plain_of.items()}


def convert(inputs, output, input_format="auto", output_format="tfrecord", field_size=records.CRITEO_FIELDS,
            feature_size=SPEC_BY_NAME["feature_size"].default, column_spec: ColumnSpec | None = None, num_files=None,
            target_mb=100.0, channels=1, channel_prefix="training", workers=None) -> dict:
    with decompressed(inputs, output) as (plain_inputs, shown_as):
        try:
            return _convert(plain_inputs, shown_as, output, input_format, output_format, field_size, feature_size,
                            column_spec or ColumnSpec(), num_files, target_mb, channels, channel_prefix, workers)
        except JobError as err:  # named as the user named the file, not as its decompressed copy
            message = str(err)
            for plain, shown in shown_as.items():
                message = message.replace(plain, shown)
            raise JobError(message) from None


def input_format_of(inputs: list[str], shown_as: dict) -> str:
    """The one format of the inputs, by their names and content (trainer.data.formats)."""
    found = {}
    for path in inputs:
        data_format, why = formats.format_of_file(path)
        found.setdefault(data_format, f"{shown_as.get(path, path)} ({why})")
    if len(found) > 1:
        raise JobError("the inputs mix formats: " + "; ".join(f"{w} is {formats.NAMES[f]}" for f, w in found.items()))
    (data_format, _), = found.items()
    if data_format == "tfrecord":
        raise JobError(f"{inputs[0]} is TFRecord already")
    return data_format


def table_of(inputs: list[str], data_format: str, spec: ColumnSpec, feature_size: int) -> Table:
    """The columns of a CSV, TSV or Parquet input as a channel of these files would have them."""
    from trainer.contract.job import Channel
    from trainer.data.pipeline import columns_of

    resolved = formats.Resolved(data_format, "--input-format")
    mapping, header_line = columns_of(resolved, Channel("input", "File", "FullyReplicated", "",
                                                        os.path.dirname(inputs[0])), inputs, spec)
    return Table(data_format, mapping, spec, feature_size, header_line)


def parquet_segments(inputs: list[str], parts: int) -> list[tuple]:
    """Cut the inputs' row groups into `parts` runs of about equal rows: ((path, (group, ...)), ...)."""
    from trainer.data.parquet import open_file

    units = [(path, group, metadata.row_group(group).num_rows)
             for path in inputs for metadata in [open_file(path).metadata] for group in range(metadata.num_row_groups)]
    total, done, result = sum(rows for *_, rows in units), 0, [[] for _ in range(parts)]
    for path, group, rows in units:
        part = min(parts - 1, done * parts // max(total, 1))
        if result[part] and result[part][-1][0] == path:
            result[part][-1][1].append(group)
        else:
            result[part].append((path, [group]))
        done += rows
    return [tuple((path, tuple(groups)) for path, groups in part) for part in result]


def _convert(inputs, shown_as, output, input_format, output_format, field_size, feature_size, column_spec, num_files,
             target_mb, channels, channel_prefix, workers) -> dict:
    if input_format == "auto":
        input_format = input_format_of(inputs, shown_as)
    table = table_of(inputs, input_format, column_spec, feature_size) if input_format != "libsvm" else None
    if table is not None:
        field_size = table.columns.field_size
    if not num_files:
        per_row = 24 + 11 * field_size if output_format == "tfrecord" else 14 * field_size
        num_files = max(1, math.ceil(_rows_estimate(inputs, input_format) * per_row / (target_mb * 1e6)))
    num_files = max(num_files, channels)
    suffix = ".tfrecord" if output_format == "tfrecord" else ".libsvm"
    paths = output_paths(output, num_files, channels, channel_prefix, suffix)
    for path in paths:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    segments = parquet_segments(inputs, num_files) if input_format == "parquet" else plan_segments(inputs, num_files)
    tasks = [Task(segment, path, input_format, output_format, field_size, table, shown_as)
             for segment, path in zip(segments, paths)]
    counts = pools.run_tasks(convert_task, tasks, workers or os.cpu_count(), __name__,
                             output_format == "tfrecord" or table is not None)
    return {"input_format": input_format, "files": paths, "records": counts, "field_size": field_size,
            "feature_size": feature_size if table is not None else None,
            "columns": table.columns.summary(feature_size) if table is not None else None}


def main(args: argparse.Namespace) -> int:
    try:
        spec = ColumnSpec(*(parse_refs(getattr(args, role), role) for role in
                            ("label_column", "numeric_columns", "categorical_columns")),
                          transform=args.numeric_transform)
        result = convert(args.inputs, args.output, args.input_format, args.output_format, args.field_size,
                         args.feature_size, spec, args.num_files, args.target_mb, args.channels,
                         args.channel_prefix, args.workers)
    except JobError as err:
        print(f"trainer convert: {err}", file=sys.stderr)
        return 1
    for path, count in zip(result["files"], result["records"]):
        print(f"{path}: {count} records")
    print(f"{sum(result['records'])} records from {result['input_format']} in {len(result['files'])} files"
          + (f" ({result['columns']}); train with feature_size={result['feature_size']}, "
             f"field_size={result['field_size']}" if result["columns"] else ""))
    return 0

"""`trainer convert`: libsvm or raw Criteo rows to TFRecord (or libsvm), in parallel.

    trainer convert criteo_sample.txt --output data/ --num-files 4
    trainer convert day_0.libsvm --output data/ --target-mb 100 --channels 4

The inputs are cut into byte ranges on line boundaries, one per output file, and the
ranges are converted by a pool of processes. A gzip-compressed input (`day_0.tsv.gz`) is
decompressed first, into a temporary folder beside the output: byte ranges need a file
that can be read from any offset. `--channels K` spreads the output files
round robin over K folders (training-1 .. training-K), one per Pipe-mode channel.
Raw Criteo (label, I1..I13, C1..C26; tab or comma separated, header optional) maps onto
39 fields: I<i> has id i with its value clipped and scaled to [0, 1]; C<j> hashes to an
id in [14, 14 + hash_buckets) with value 1.
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

from trainer.data import pools, records
from trainer.errors import JobError

SAMPLE_LINES = 200
DEFAULT_HASH_BUCKETS = 117581 - records.CRITEO_FIRST_CATEGORICAL_ID


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inputs", nargs="+", help="libsvm or raw Criteo text files (each may be gzip-compressed: .gz)")
    parser.add_argument("--output", required=True, help="output folder")
    parser.add_argument("--input-format", choices=("auto", "libsvm", "criteo"), default="auto",
                        help="auto: criteo when a line has 40 tab- or comma-separated columns")
    parser.add_argument("--output-format", choices=("tfrecord", "libsvm"), default="tfrecord")
    parser.add_argument("--field-size", type=int, default=records.CRITEO_FIELDS,
                        help="fields per libsvm line (raw Criteo always has 39)")
    parser.add_argument("--hash-buckets", type=int, default=DEFAULT_HASH_BUCKETS,
                        help="ids per categorical Criteo column space (feature_size = 14 + this)")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--num-files", type=int, help="number of output files")
    size.add_argument("--target-mb", type=float, default=100.0, help="approximate size of each output file")
    parser.add_argument("--channels", type=int, default=1, help="spread the files over this many channel folders")
    parser.add_argument("--channel-prefix", default="training", help="channel folder name prefix")
    parser.add_argument("--workers", type=int, default=os.cpu_count(), help="parallel processes")


@dataclass(frozen=True)
class Task:
    segments: tuple  # ((path, start_byte, end_byte), ...)
    output: str
    input_format: str
    output_format: str
    field_size: int
    hash_buckets: int
    shown_as: dict = field(default_factory=dict)  # a decompressed input's path -> the file the user named


def detect_format(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if line.strip():
                separator = "\t" if "\t" in line else ","
                return "criteo" if len(line.rstrip("\r\n").split(separator)) == 1 + records.CRITEO_FIELDS else "libsvm"
    return "libsvm"


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


def _parse(line: str, task: Task):
    if task.input_format == "criteo":
        return records.parse_criteo_line(line, task.hash_buckets)
    if not line.strip():
        return None
    return records.parse_libsvm_line(line, task.field_size)


def convert_task(task: Task) -> int:
    """Convert one output file's byte ranges; returns the records written."""
    count = 0
    with records.RecordWriter(task.output, task.output_format) as writer:
        for path, start, end in task.segments:
            for offset, raw in _lines(path, start, end):
                line = raw.decode("utf-8", errors="replace")
                try:
                    row = _parse(line, task)
                except ValueError as err:
                    raise JobError(f"file {task.shown_as.get(path, path)} line {_line_number(path, offset)}: "
                                   f"{err}") from None
                if row is not None:
                    writer.write(*row)
                    count += 1
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


def _estimate_output_bytes(inputs, input_format, output_format, field_size, hash_buckets) -> float:
    """Output bytes per input byte, from converting the first lines."""
    sample = Task(((inputs[0], 0, os.path.getsize(inputs[0])),), os.devnull, input_format,
                  output_format, field_size, hash_buckets)
    in_bytes = out_rows = 0
    for _, raw in _lines(inputs[0], 0, os.path.getsize(inputs[0])):
        in_bytes += len(raw)
        row = _parse(raw.decode("utf-8", errors="replace"), sample)
        if row is not None:
            out_rows += 1
        if out_rows >= SAMPLE_LINES:
            break
    per_row = 24 + 11 * field_size if output_format == "tfrecord" else 14 * field_size
    return (out_rows * per_row / in_bytes) if in_bytes else 1.0


def output_paths(output: str, parts: int, channels: int, prefix: str, suffix: str) -> list[str]:
    if channels <= 1:
        return [os.path.join(output, f"part-{p:05d}{suffix}") for p in range(parts)]
    return [os.path.join(output, f"{prefix}-{p % channels + 1}", f"part-{p:05d}{suffix}") for p in range(parts)]


@contextlib.contextmanager
def decompressed(inputs: list[str], output: str):
    """(paths, shown_as): the inputs, each gzip-compressed one decompressed into a temporary
    folder in `output` (removed afterwards), and which file each decompressed path stands for."""
    compressed = [path for path in inputs if records.is_gzip_path(path)]
    if not compressed:
        yield list(inputs), {}
        return
    os.makedirs(output, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".decompressed-", dir=output) as folder:
        plain_of = {}
        for index, path in enumerate(compressed):
            plain_of[path] = os.path.join(folder, f"{index}-{os.path.basename(path)[:-len(records.GZIP_SUFFIX)]}")
            try:
                with gzip.open(path, "rb") as source, open(plain_of[path], "wb") as target:
                    shutil.copyfileobj(source, target, 1 << 20)
            except (OSError, EOFError) as err:  # gzip.BadGzipFile is an OSError
                raise JobError(f"file {path}: not readable as gzip ({err})") from None
        yield [plain_of.get(path, path) for path in inputs], {plain: path for path, plain in plain_of.items()}


def convert(inputs, output, input_format="auto", output_format="tfrecord", field_size=records.CRITEO_FIELDS,
            hash_buckets=DEFAULT_HASH_BUCKETS, num_files=None, target_mb=100.0, channels=1,
            channel_prefix="training", workers=None) -> dict:
    with decompressed(inputs, output) as (plain_inputs, shown_as):
        return _convert(plain_inputs, shown_as, output, input_format, output_format, field_size, hash_buckets,
                        num_files, target_mb, channels, channel_prefix, workers)


def _convert(inputs, shown_as, output, input_format, output_format, field_size, hash_buckets, num_files, target_mb,
             channels, channel_prefix, workers) -> dict:
    if input_format == "auto":
        input_format = detect_format(inputs[0])
    if input_format == "criteo":
        field_size = records.CRITEO_FIELDS
    if not num_files:
        ratio = _estimate_output_bytes(inputs, input_format, output_format, field_size, hash_buckets)
        estimated = ratio * sum(os.path.getsize(p) for p in inputs)
        num_files = max(1, math.ceil(estimated / (target_mb * 1e6)))
    num_files = max(num_files, channels)
    suffix = ".tfrecord" if output_format == "tfrecord" else ".libsvm"
    paths = output_paths(output, num_files, channels, channel_prefix, suffix)
    for path in paths:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    tasks = [Task(segments, path, input_format, output_format, field_size, hash_buckets, shown_as)
             for segments, path in zip(plan_segments(inputs, num_files), paths)]
    counts = pools.run_tasks(convert_task, tasks, workers or os.cpu_count(), __name__,
                             "tfrecord" in (input_format, output_format))
    return {"input_format": input_format, "files": paths, "records": counts,
            "feature_size": records.criteo_feature_size(hash_buckets) if input_format == "criteo" else None}


def main(args: argparse.Namespace) -> int:
    try:
        result = convert(args.inputs, args.output, args.input_format, args.output_format, args.field_size,
                         args.hash_buckets, args.num_files, args.target_mb, args.channels,
                         args.channel_prefix, args.workers)
    except JobError as err:
        print(f"trainer convert: {err}", file=sys.stderr)
        return 1
    for path, count in zip(result["files"], result["records"]):
        print(f"{path}: {count} records")
    print(f"{sum(result['records'])} records from {result['input_format']} in {len(result['files'])} files"
          + (f"; use feature_size={result['feature_size']}" if result["feature_size"] else ""))
    return 0

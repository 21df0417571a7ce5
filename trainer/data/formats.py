"""Which record format a channel holds, and what its files say about their columns.

The built-in model reads five formats: TFRecord and libsvm (the DeepFM sample's record
layout: trainer.data.records) and click logs as they land, CSV, TSV and Parquet (raw columns,
mapped to features in the graph: trainer.data.columns, trainer.data.raw_features).

A channel's format is, in this order: the `data_format` hyperparameter; the channel's
ContentType, read as AWS's built-in algorithms read it (`text/csv`, `text/csv;label_size=1`,
`application/x-parquet`, `text/libsvm`, ...); each file's suffix; else each file's first
bytes (Parquet's `PAR1` magic, TFRecord's framing and its checksum, a text line's shape).
The reason goes with the format, so an error later can say which format it tried and why.
"""
from __future__ import annotations

import gzip
import os
import re
import struct
from dataclasses import dataclass, field

from trainer.errors import JobError

FORMATS = ("tfrecord", "libsvm", "csv", "tsv", "parquet")
# Raw columns: one row per line of a table, or a Parquet row.
TABLE_FORMATS = ("csv", "tsv")
COLUMN_FORMATS = TABLE_FORMATS + ("parquet",)
DELIMITERS = {"csv": ",", "tsv": "\t"}
NAMES = {"tfrecord": "TFRecord", "libsvm": "libsvm", "csv": "CSV", "tsv": "TSV", "parquet": "Parquet"}

GZIP_SUFFIX = ".gz"
SUFFIXES = {
    ".tfrecord": "tfrecord", ".tfrecords": "tfrecord", ".tfr": "tfrecord",
    ".libsvm": "libsvm", ".svm": "libsvm",
    ".csv": "csv", ".tsv": "tsv",
    ".parquet": "parquet", ".pq": "parquet", ".parq": "parquet",
}
# ContentType values (before any ";" parameters) and the format each names. A ContentType
# the SDK leaves generic says nothing; any other is a claim the job checks.
CONTENT_TYPES = {
    "text/csv": "csv", "text/x-csv": "csv", "application/csv": "csv",
    "text/tab-separated-values": "tsv", "text/tsv": "tsv", "text/x-tsv": "tsv",
    "application/x-parquet": "parquet", "application/parquet": "parquet", "application/vnd.apache.parquet": "parquet",
    "text/libsvm": "libsvm", "text/x-libsvm": "libsvm", "application/x-libsvm": "libsvm",
    "application/x-tfrecord": "tfrecord", "application/tfrecord": "tfrecord", "application/x-tfrecords": "tfrecord",
}
UNSPECIFIC_CONTENT_TYPES = ("", "application/octet-stream", "binary/octet-stream", "application/x-sagemaker-default")
LIBSVM_CONTENT_TYPE = "text/libsvm"
TFRECORD_CONTENT_TYPE = "application/x-tfrecord"
CONTENT_TYPE_OF = {"tfrecord": TFRECORD_CONTENT_TYPE, "libsvm": LIBSVM_CONTENT_TYPE, "csv": "text/csv",
                   "tsv": "text/tab-separated-values", "parquet": "application/x-parquet"}

PARQUET_MAGIC = b"PAR1"
GZIP_MAGIC = b"\x1f\x8b"
SNIFF_BYTES = 1 << 16
LIBSVM_PAIR = re.compile(r"^\d+:[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$")


@dataclass(frozen=True)
class ContentType:
    """A channel's ContentType: the format it names (None: it names none) and the parameters
    of `text/csv` that matter here (RFC 4180's `header`, AWS's `label_size`)."""

    data_format: str | None
    header: bool | None = None  # header=present|absent; None: look at the first line
    label_size: int | None = None

    @staticmethod
    def parse(text: str, channel: str) -> "ContentType":
        kind, *parameters = [part.strip() for part in (text or "").lower().split(";")]
        options = dict(part.partition("=")[::2] for part in parameters if part)
        data_format = CONTENT_TYPES.get(kind)
        if data_format is None:
            data_format = next((f for f in ("libsvm", "tfrecord", "parquet") if f in kind), None)
        if data_format is None and kind not in UNSPECIFIC_CONTENT_TYPES:
            raise JobError(f"channel '{channel}': ContentType {text!r} is not a format the built-in model reads; it "
                           f"reads {', '.join(sorted(set(CONTENT_TYPE_OF.values())))} (or leave ContentType unset: "
                           "the files' names and content then tell)")
        header = {"present": True, "absent": False}.get(options.get("header", "").strip())
        label_size = options.get("label_size", "").strip()
        if label_size and label_size != "1":
            raise JobError(f"channel '{channel}': ContentType {text!r}: label_size={label_size}; the built-in model "
                           "trains on one label column (label_size=1)")
        return ContentType(data_format, header, 1 if label_size else None)


@dataclass(frozen=True)
class Resolved:
    """A channel's format and why (for the log and for errors that say which format was tried)."""

    data_format: str
    why: str
    content_type: ContentType = field(default_factory=lambda: ContentType(None))

    @property
    def name(self) -> str:
        return NAMES[self.data_format]


def is_gzip_path(path: str) -> bool:
    return path.lower().endswith(GZIP_SUFFIX)


def format_of_suffix(path: str) -> str | None:
    """The format a file's name says (train.tsv.gz is tsv), or None (.txt, no suffix)."""
    name = path.lower().removesuffix(GZIP_SUFFIX)
    return SUFFIXES.get(os.path.splitext(name)[1])


def _masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum of its length field: CRC-32C, masked as TensorFlow masks it."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    crc ^= 0xFFFFFFFF
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def format_of_content(head: bytes) -> tuple[str | None, str]:
    """(format, why) from a file's first bytes (decompressed), or (None, what was seen)."""
    if head[:4] == PARQUET_MAGIC:
        return "parquet", "it starts with Parquet's PAR1 magic"
    if len(head) >= 12:
        (length,) = struct.unpack("<Q", head[:8])
        if struct.unpack("<I", head[8:12])[0] == _masked_crc32c(head[:8]) and length < 1 << 30:
            return "tfrecord", "it starts with a TFRecord record header whose checksum holds"
    line = head.split(b"\n", 1)[0].rstrip(b"\r")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        return None, "its first bytes are neither Parquet, TFRecord nor UTF-8 text"
    tokens = text.split()
    if len(tokens) > 1 and all(LIBSVM_PAIR.match(token) for token in tokens[1:]):
        return "libsvm", "its first line is a label and id:value pairs"
    if "\t" in text:
        return "tsv", "its first line has tab-separated columns"
    if "," in text:
        return "csv", "its first line has comma-separated columns"
    return None, f"its first line ({text[:60]!r}) is neither libsvm, tab- nor comma-separated"


def read_head(path: str, size: int = SNIFF_BYTES) -> bytes:
    """A file's first bytes, decompressed where it is gzip-compressed."""
    with open(path, "rb") as f:
        head = f.read(size)
    if head[:2] == GZIP_MAGIC:
        try:
            with gzip.open(path, "rb") as f:
                return f.read(size)
        except (OSError, EOFError) as err:
            raise JobError(f"file {path}: gzip-compressed, but cannot be decompressed ({err})") from None
    return head


def format_of_file(path: str) -> tuple[str, str]:
    """(format, why) of one file by its suffix, else its content."""
    by_name = format_of_suffix(path)
    if by_name:
        return by_name, f"its name ends in {os.path.splitext(path.lower().removesuffix(GZIP_SUFFIX))[1]}"
    try:
        by_content, why = format_of_content(read_head(path))
    except OSError as err:
        raise JobError(f"file {path} cannot be read: {err}") from None
    if by_content is None:
        raise JobError(f"file {path}: its format cannot be told from its name or content ({why}; tried Parquet's "
                       "PAR1 magic, TFRecord's framing, libsvm, TSV and CSV lines): name it .tfrecord, .libsvm, "
                       ".csv, .tsv or .parquet, or set the channel's ContentType or data_format")
    return by_content, why


def resolve_format(requested: str | None, channel, files: list[str]) -> Resolved:
    """A channel's format: the hyperparameter, its ContentType, its files' names, their content."""
    content_type = ContentType.parse(channel.content_type, channel.name)
    if requested:
        return Resolved(requested, f"data_format={requested}", content_type)
    if content_type.data_format:
        return Resolved(content_type.data_format, f"its ContentType {channel.content_type}", content_type)
    if not files:  # Pipe mode (or a data group's channel not on this host): no file to look at
        return Resolved("tfrecord", "no file to look at here and no ContentType or data_format: TFRecord, as "
                                    "AWS's PipeModeDataset reads", content_type)
    found: dict[str, tuple[str, str]] = {}
    for path in files:
        data_format, why = format_of_file(path)
        found.setdefault(data_format, (path, why))
    if len(found) > 1:
        mixed = "; ".join(f"{os.path.basename(path)} is {NAMES[f]} ({why})" for f, (path, why) in found.items())
        raise JobError(f"channel '{channel.name}' mixes formats: {mixed}; keep one format per channel or set "
                       "data_format")
    (data_format, (path, why)), = found.items()
    return Resolved(data_format, f"{os.path.basename(path)}: {why}" if len(files) == 1
                    else f"its files' names and content ({os.path.basename(path)}: {why})", content_type)


# What a channel's files say about their columns (the header of a table, a Parquet file's
# schema): read once per file, for the column mapping (trainer.data.columns).

@dataclass(frozen=True)
class Header:
    """A file's column names (None: it has no header) and how many columns its rows have."""

    path: str
    names: tuple[str, ...] | None
    width: int
    line: str = ""  # a table's header line as it is written (every other file's must equal it)


def table_header(path: str, data_format: str, header: bool | None, label_position: int) -> Header:
    """A CSV or TSV file's first line: its names when it is a header (header=present, or, when
    the ContentType does not say, its label column is not a number), and its width."""
    import csv
    import io

    head = read_head(path).split(b"\n", 1)[0].rstrip(b"\r").decode("utf-8", errors="replace")
    fields = next(csv.reader(io.StringIO(head), delimiter=DELIMITERS[data_format]), [])
    header = is_header_row(fields, label_position, header)
    return Header(path, tuple(name.strip() for name in fields) if header else None, len(fields),
                  head if header else "")


def is_header_row(fields: list[str], label_position: int, header: bool | None = None) -> bool:
    """Whether a table's first row is its header: as the ContentType says (`header`), or its
    label field is not a number (the graph's rule too: trainer.data.raw_features.is_header)."""
    if header is not None:
        return header
    return not is_number(fields[label_position].strip()) if label_position < len(fields) else True


def is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True

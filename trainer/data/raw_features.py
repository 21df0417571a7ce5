"""Raw columns to the model's features, in the TensorFlow graph: the one transform that
training (every format, every mode), `trainer convert` and the exported SavedModel's
serving signatures share, so a row scores the same wherever it comes from.

Rows travel as `Columns`: {"label": float32[n], "numeric": float32[n, k] (NaN: missing),
"categorical": string[n, m] ("": missing), or a list of m string[n], as a table's decoding
gives them; or, from a Parquet reader that hashed each distinct value once as it read,
"categorical_ids": int64[n, m]}. A CSV or TSV line becomes one through
tf.io.decode_csv; a Parquet row group through trainer.data.parquet. `features_of` then gives
the built-in model's record layout: numeric column i is field i (id i, value the transform
of its number, 0 where missing); categorical column j is field k + j, its value hashed with
a key of its own (hash_column) into the ids [k, feature_size), so the same value in two
columns is two features, and a missing value is its column's own id.
"""
from __future__ import annotations

import re

import tensorflow as tf

from trainer.data.columns import ColumnMapping
from trainer.data.records import NUMBER_PATTERN

HASH_KEY = 0x7261775F636F6C73  # every column's key: this, and its index times MIX_INCREMENT
MIX_INCREMENT, MIX_1, MIX_2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB  # SplitMix64's
NOT_A_HEADER = "\x00"  # a header line no table has: "this stream has no header"


def categorical_columns(categorical) -> list:
    """The categorical columns, each string[n]: a list as given, or a string[n, m]'s columns."""
    return list(categorical) if isinstance(categorical, (list, tuple)) else tf.unstack(categorical, axis=1)


def hash_column(values, index: int, buckets: int, first_id: int):
    """A categorical column's values (string[...]) -> their ids from `first_id`, in `buckets`:
    each value's 64-bit fingerprint (farmhash, tf.strings.to_hash_bucket_fast's, stable across
    releases) with the column's key mixed in by SplitMix64's finalizer, so that two columns'
    values collide independently. (A keyed SipHash, to_hash_bucket_strong, gives the same
    independence at 1.4x the cost: a CSV row's 26 hashes were a tenth of its parse.)"""
    def shifted(x, bits):
        return tf.bitwise.right_shift(x, tf.constant(bits, tf.uint64))

    x = tf.bitcast(tf.strings.to_hash_bucket_fast(values, 2**63 - 1), tf.uint64)
    x = tf.bitwise.bitwise_xor(x, tf.constant(HASH_KEY ^ (index * MIX_INCREMENT) & (2**64 - 1), tf.uint64))
    x = tf.bitwise.bitwise_xor(x, shifted(x, 30)) * tf.constant(MIX_1, tf.uint64)
    x = tf.bitwise.bitwise_xor(x, shifted(x, 27)) * tf.constant(MIX_2, tf.uint64)
    x = tf.bitwise.bitwise_xor(x, shifted(x, 31))
    return first_id + tf.cast(x % tf.constant(buckets, tf.uint64), tf.int64)


def hash_categorical(categorical, rows, buckets: int, first_id: int):
    """The categorical columns (categorical_columns) -> int64[rows, m], each hashed as hash_column."""
    columns = categorical_columns(categorical)
    if not columns:
        return tf.zeros([rows, 0], tf.int64)
    return tf.stack([hash_column(column, index, buckets, first_id) for index, column in enumerate(columns)], axis=1)


def hash_into(mapping: ColumnMapping, feature_size: int) -> tuple[int, int]:
    """(buckets, first id) of the categorical columns: the ids after the numeric fields'."""
    return mapping.buckets(feature_size), len(mapping.numeric)


def transform_numeric(numeric, transform: str):
    """float32[n, k] with NaN for missing -> the model's values: missing is 0, then the transform."""
    present = tf.where(tf.math.is_nan(numeric), tf.zeros_like(numeric), numeric)
    if transform == "log1p":
        return tf.math.log1p(tf.maximum(present, 0.0))
    return present


def features_of(columns: dict, mapping: ColumnMapping, feature_size: int):
    """Columns -> ({"ids": int64[n, field_size], "values": float32[n, field_size]}, label float32[n, 1])."""
    numeric = columns["numeric"]
    rows = tf.shape(columns["label"])[0]
    count = len(mapping.numeric)
    numeric_ids = tf.broadcast_to(tf.range(count, dtype=tf.int64), [rows, count])
    categorical_ids = columns.get("categorical_ids")  # a Parquet reader's, hashed as it read (hash_into)
    if categorical_ids is None:
        categorical_ids = hash_categorical(columns["categorical"], rows, *hash_into(mapping, feature_size))
    values = tf.concat([transform_numeric(numeric, mapping.transform),
                        tf.ones([rows, len(mapping.categorical)], tf.float32)], axis=1)
    return ({"ids": tf.concat([numeric_ids, categorical_ids], axis=1), "values": values},
            tf.reshape(columns["label"], [-1, 1]))


def decode_table(lines, mapping: ColumnMapping, delimiter: str, label_required: bool = True) -> dict:
    """CSV or TSV lines -> Columns. Every row must have the mapping's width; a numeric field
    must be a number or empty; the label must be a number (`label_required`: not empty)."""
    defaults = [tf.constant([""])] * mapping.width
    defaults[mapping.label.position] = tf.constant([], tf.float32) if label_required else tf.constant([0.0])
    for column in mapping.numeric:
        defaults[column.position] = tf.constant([float("nan")])
    fields = tf.io.decode_csv(lines, defaults, field_delim=delimiter)
    empty = tf.zeros([tf.shape(lines)[0], 0])
    return {
        "label": fields[mapping.label.position],
        "numeric": tf.stack([fields[c.position] for c in mapping.numeric], axis=1) if mapping.numeric else empty,
        # As decoded, a column each: stacking them would only be undone to hash each column.
        "categorical": [fields[c.position] for c in mapping.categorical],
    }


def named_columns(columns: dict, mapping: ColumnMapping) -> dict:
    """Columns -> {column name: its values}: the label and numeric columns float32, the
    categorical ones strings."""
    named = {mapping.label.name: columns["label"]}
    named.update({c.name: columns["numeric"][:, i] for i, c in enumerate(mapping.numeric)})
    named.update({c.name: column for c, column in zip(mapping.categorical,
                                                       categorical_columns(columns["categorical"]))})
    return named


def table_parser(mapping: ColumnMapping, delimiter: str, feature_size: int, bad_records=None):
    """A window of lines -> (features, label), as every other format's parser."""
    if bad_records is not None:
        return lambda lines: features_of(decode_table(bad_records.well_formed_rows(lines, mapping, delimiter),
                                                      mapping, delimiter), mapping, feature_size)
    return lambda lines: features_of(decode_table(lines, mapping, delimiter), mapping, feature_size)


def columns_parser(mapping: ColumnMapping, feature_size: int, bad_records=None):
    """A window of Columns (Parquet's) -> (features, label); with `bad_records`, rows the
    reader marked bad (a NaN label) are dropped and counted."""
    if bad_records is not None:
        return lambda columns: features_of(bad_records.labelled_rows(columns), mapping, feature_size)
    return lambda columns: features_of(columns, mapping, feature_size)


def is_header(lines, label_position: int, delimiter: str):
    """bool[n]: lines whose label field (unquoted) is not a number (a header line)."""
    fields = tf.strings.split(lines, delimiter)
    label = tf.strings.strip(fields[:, label_position:label_position + 1].to_tensor(default_value="x"))[:, 0]
    return tf.logical_not(tf.strings.regex_full_match(tf.strings.regex_replace(label, '^"(.*)"$', "\\1"),
                                                      NUMBER_PATTERN))


def first_is_header(first, mapping: ColumnMapping, delimiter: str, header: bool | None):
    """Whether a stream's first line (string[1]) is its header: as the ContentType says
    (`header`), or (None) its label field is not a number."""
    if header is not None:
        return tf.constant(header)
    return tf.reduce_any(is_header(first, mapping.label.position, delimiter))


def header_count(lines, mapping: ColumnMapping, delimiter: str, header: bool | None, where, expected: str = ""):
    """1 where a file's first line is its header, else 0 (a scalar int64 tensor). `expected`:
    the header it must have (the mapping was read by name from another file's); another fails,
    naming `where`."""
    first = lines.take(1).reduce(tf.constant(""), lambda _, line: line)
    found = tf.logical_and(first_is_header(tf.reshape(first, [1]), mapping, delimiter, header),
                           tf.strings.length(first) > 0)
    if expected:  # one message, which trainer.data.diagnose finds in the error
        check = tf.debugging.Assert(tf.logical_or(tf.logical_not(found), tf.equal(first, expected)), [tf.strings.join([
            "JobError: ", where, " has another header (", first, ") than the channel's first file (", expected,
            "), by whose header its columns were found: give every file the same columns"])])
        with tf.control_dependencies([check]):
            found = tf.identity(found)
    return tf.cast(found, tf.int64)


def drop_headers(blocks, mapping: ColumnMapping, delimiter: str, header: bool | None):
    """A stream's blocks of lines without their headers: every line equal to the stream's
    first line, when that one is a header. Pipe mode streams every object's header."""
    def step(state, block):
        first_seen, known = state

        def learn():
            found = first_is_header(block[:1], mapping, delimiter, header)
            return tf.cond(found, lambda: block[0], lambda: tf.constant(NOT_A_HEADER))

        header_line = tf.cond(first_seen | (tf.size(block) == 0), lambda: known, learn)
        seen = first_seen | (tf.size(block) > 0)
        return (seen, header_line), tf.boolean_mask(block, tf.not_equal(block, header_line))

    start = (tf.constant(False), tf.constant(NOT_A_HEADER))
    return blocks.scan(start, step).filter(lambda block: tf.size(block) > 0)


def signature_name(column: str) -> str:
    """A column's name as a serving signature's input (letters, digits, _ . / -)."""
    name = re.sub(r"[^A-Za-z0-9_./-]", "_", column)
    return name if re.match(r"[A-Za-z0-9.]", name) else f"c{name}"


def serving_signatures(model, mapping: ColumnMapping, delimiter: str, feature_size: int) -> dict:
    """The exported model's signatures: `serving_default` takes the feature columns by name
    (numbers as float32, categorical values as strings; one value per row), `csv` a row as one
    line (with or without its label column, `delimiter`-separated), `features` the model's own
    inputs (ids, values). Each returns {"probability": float32[n, 1]}."""
    names = [signature_name(c.name) for c in mapping.features]
    numeric_count = len(mapping.numeric)
    specs = [tf.TensorSpec([None], tf.float32 if i < numeric_count else tf.string, name=name)
             for i, name in enumerate(names)]

    def score(columns):
        features, _ = features_of(columns, mapping, feature_size)
        return {"probability": model(features, training=False)}

    @tf.function(input_signature=specs)
    def by_name(*values):
        rows = tf.shape(values[0])[0]
        return score({"label": tf.zeros([rows]),
                      "numeric": tf.stack(values[:numeric_count], axis=1) if numeric_count else tf.zeros([rows, 0]),
                      "categorical": list(values[numeric_count:])})

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="line")])
    def csv_line(line):
        fields = tf.strings.split(line, delimiter).row_lengths()
        # A row without its label: an empty label field where the training data had it.
        label_at = mapping.label.position
        with_label = (delimiter + line if label_at == 0 else
                      tf.strings.regex_replace(line, f"^((?:[^{re.escape(delimiter)}]*{re.escape(delimiter)}){{{label_at}}})",
                                               "\\1" + delimiter.replace("\\", "\\\\")))
        lines = tf.where(fields == mapping.width - 1, with_label, line)
        return score(decode_table(lines, mapping, delimiter, label_required=False))

    field_size = mapping.field_size

    @tf.function(input_signature=[tf.TensorSpec([None, field_size], tf.int64, name="ids"),
                                  tf.TensorSpec([None, field_size], tf.float32, name="values")])
    def features(ids, values):
        return {"probability": model({"ids": ids, "values": values}, training=False)}

    return {"serving_default": by_name.get_concrete_function(), "csv": csv_line.get_concrete_function(),
            "features": features.get_concrete_function()}

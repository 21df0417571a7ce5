"""The record layout of the DeepFM sample, and its text forms.

TFRecord: a tf.train.Example with `ids` int64[field_size], `values` float[field_size],
`label` float[1]. libsvm: `label id:value id:value ...`, one pair per field. Raw Criteo:
`label, I1..I13, C1..C26` (tab or comma separated) mapped onto the same 39 fields.

The Python parsers here (one line at a time) serve the converter and error diagnosis;
training parses a whole batch at once in TensorFlow (`batch_parser`).
"""
from __future__ import annotations

import zlib

FORMATS = ("tfrecord", "libsvm")
LIBSVM_SUFFIXES = (".libsvm", ".svm", ".txt", ".csv", ".tsv")

# Raw Criteo: 13 integer columns then 26 hashed categorical ones.
CRITEO_CONTINUOUS = 13
CRITEO_CATEGORICAL = 26
CRITEO_FIELDS = CRITEO_CONTINUOUS + CRITEO_CATEGORICAL
# Clip points of the continuous columns (from the original DeepFM Criteo preprocessing):
# values are clipped to [0, clip] and scaled to [0, 1].
CRITEO_CLIPS = (20, 600, 100, 50, 64000, 500, 100, 50, 500, 10, 10, 10, 50)
# Continuous field i has id i + 1; categorical ids start after them.
CRITEO_FIRST_CATEGORICAL_ID = CRITEO_CONTINUOUS + 1


def format_of_path(path: str) -> str:
    return "libsvm" if path.lower().endswith(LIBSVM_SUFFIXES) else "tfrecord"


def parse_libsvm_line(line: str, field_size: int, feature_size: int | None = None):
    """(label, ids, values) of one libsvm line; ValueError saying what is wrong."""
    tokens = line.split()
    if len(tokens) != field_size + 1:
        raise ValueError(f"expected a label and {field_size} id:value pairs, found {len(tokens)} tokens")
    try:
        label = float(tokens[0])
    except ValueError:
        raise ValueError(f"label {tokens[0]!r} is not a number") from None
    ids, values = [], []
    for token in tokens[1:]:
        key, sep, value = token.partition(":")
        try:
            if not sep:
                raise ValueError
            ids.append(int(key))
            values.append(float(value))
        except ValueError:
            raise ValueError(f"token {token!r} is not id:value") from None
        if ids[-1] < 0 or (feature_size is not None and ids[-1] >= feature_size):
            raise ValueError(f"id {ids[-1]} is outside [0, feature_size={feature_size})")
    return label, ids, values


def format_libsvm_line(label: float, ids, values) -> str:
    pairs = " ".join(f"{int(i)}:{float(v):.6g}" for i, v in zip(ids, values))
    return f"{float(label):g} {pairs}"


def criteo_hash_id(field: int, token: str, hash_buckets: int) -> int:
    """Stable id of a categorical value (a missing value gets its field's own id)."""
    bucket = zlib.crc32(f"{field}:{token}".encode()) % hash_buckets
    return CRITEO_FIRST_CATEGORICAL_ID + bucket


def criteo_feature_size(hash_buckets: int) -> int:
    return CRITEO_FIRST_CATEGORICAL_ID + hash_buckets


def parse_criteo_line(line: str, hash_buckets: int):
    """(label, ids, values) of one raw Criteo row, or None for a header row."""
    separator = "\t" if "\t" in line else ","
    columns = line.rstrip("\r\n").split(separator)
    if columns[0].strip().lower() == "label":
        return None
    if len(columns) != 1 + CRITEO_FIELDS:
        raise ValueError(f"expected {1 + CRITEO_FIELDS} columns (label, I1..I13, C1..C26), found {len(columns)}")
    try:
        label = float(columns[0])
    except ValueError:
        raise ValueError(f"label {columns[0]!r} is not a number") from None
    ids, values = [], []
    for i in range(CRITEO_CONTINUOUS):
        text = columns[1 + i].strip()
        try:
            number = float(text) if text else 0.0
        except ValueError:
            raise ValueError(f"column I{i + 1} value {text!r} is not a number") from None
        ids.append(i + 1)
        values.append(min(max(number, 0.0), CRITEO_CLIPS[i]) / CRITEO_CLIPS[i])
    for j in range(CRITEO_CATEGORICAL):
        ids.append(criteo_hash_id(j, columns[1 + CRITEO_CONTINUOUS + j].strip(), hash_buckets))
        values.append(1.0)
    return label, ids, values


def encode_example(label: float, ids, values) -> bytes:
    import tensorflow as tf

    feature = tf.train.Feature
    return tf.train.Example(features=tf.train.Features(feature={
        "ids": feature(int64_list=tf.train.Int64List(value=[int(i) for i in ids])),
        "values": feature(float_list=tf.train.FloatList(value=[float(v) for v in values])),
        "label": feature(float_list=tf.train.FloatList(value=[float(label)])),
    })).SerializeToString()


def batch_parser(data_format: str, field_size: int):
    """A function from a batch of serialized records (string[batch]) to (features, label).

    Vectorised over the batch (P18: batch, then parse): one op call per batch instead of
    one per record.
    """
    import tensorflow as tf

    if data_format == "tfrecord":
        spec = {
            "ids": tf.io.FixedLenFeature([field_size], tf.int64),
            "values": tf.io.FixedLenFeature([field_size], tf.float32),
            "label": tf.io.FixedLenFeature([1], tf.float32),
        }

        def parse_tfrecord(serialized):
            parsed = tf.io.parse_example(serialized, spec)
            return {"ids": parsed["ids"], "values": parsed["values"]}, parsed["label"]

        return parse_tfrecord

    def parse_libsvm(lines):
        tokens = tf.strings.split(tf.strings.strip(lines))  # ragged [batch, 1 + fields]
        tf.debugging.assert_equal(
            tokens.row_lengths(), tf.cast(field_size + 1, tf.int64),
            message=f"libsvm line without a label and {field_size} id:value pairs")
        tokens = tokens.to_tensor()
        label = tf.strings.to_number(tokens[:, :1], tf.float32)
        pairs = tf.strings.split(tokens[:, 1:], ":").to_tensor(shape=[None, field_size, 2])
        ids = tf.strings.to_number(pairs[:, :, 0], tf.int64)
        values = tf.strings.to_number(pairs[:, :, 1], tf.float32)
        return {"ids": ids, "values": values}, label

    return parse_libsvm

"""The record layout of the DeepFM sample, and its text form.

TFRecord: a tf.train.Example with `ids` int64[field_size], `values` float[field_size],
`label` float[1]. libsvm: `label id:value id:value ...`, one pair per field. (Raw columns,
CSV, TSV and Parquet, become the same layout in the graph: trainer.data.raw_features.)

The Python parsers here (one line at a time) serve the converter and error diagnosis;
training parses a whole batch at once in TensorFlow (`batch_parser`).
"""
from __future__ import annotations

# The DeepFM sample's Criteo layout: 13 continuous fields then 26 categorical ones.
CRITEO_CONTINUOUS = 13
CRITEO_CATEGORICAL = 26
CRITEO_FIELDS = CRITEO_CONTINUOUS + CRITEO_CATEGORICAL
# Continuous field i has id i + 1; categorical ids start after them.
CRITEO_FIRST_CATEGORICAL_ID = CRITEO_CONTINUOUS + 1


def _number(text: str, what: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number") from None


def parse_libsvm_line(line: str, field_size: int, feature_size: int | None = None):
    """(label, ids, values) of one libsvm line; ValueError saying what is wrong."""
    tokens = line.split()
    if len(tokens) != field_size + 1:
        raise ValueError(f"expected a label and {field_size} id:value pairs, found {len(tokens)} tokens")
    label = _number(tokens[0], "label")
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


def _varint(value: int) -> bytes:
    out = bytearray()
    value &= (1 << 64) - 1  # negative int64 values are ten-byte two's complement varints
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _feature_entry(key: bytes, feature: bytes) -> bytes:
    return _field(1, _field(1, key) + _field(2, feature))  # Features.feature map entry


def encode_example(label: float, ids, values) -> bytes:
    """A serialized tf.train.Example of the layout, encoded directly.

    Building tf.train.Example objects costs tens of microseconds a row from Python; the
    layout is fixed, so its wire format is written here (tests check it against
    TensorFlow's parser).
    """
    import numpy as np

    int64_list = _field(1, b"".join(_varint(int(i)) for i in ids))
    values_list = _field(1, np.asarray(values, dtype="<f4").tobytes())
    label_list = _field(1, np.asarray([label], dtype="<f4").tobytes())
    features = (_feature_entry(b"ids", _field(3, int64_list))
                + _feature_entry(b"values", _field(2, values_list))
                + _feature_entry(b"label", _field(2, label_list)))
    return _field(1, features)


class RecordWriter:
    """Writes rows (label, ids, values) to one file as TFRecord or libsvm."""

    def __init__(self, path: str, data_format: str):
        if data_format == "tfrecord":
            import tensorflow as tf

            self._file = tf.io.TFRecordWriter(path)
            self._encode = encode_example
        else:
            self._file = open(path, "w")
            self._encode = lambda *row: format_libsvm_line(*row) + "\n"

    def write(self, label, ids, values) -> None:
        self._file.write(self._encode(label, ids, values))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._file.close()


# What a well-formed libsvm token is (RE2 syntax, for tf.strings.regex_full_match).
NUMBER_PATTERN = r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?"
PAIR_PATTERN = r"[0-9]+:" + NUMBER_PATTERN


class BadRecords:
    """skip_bad_records: which records of a parsed window to drop, and how many were.

    A libsvm line is bad when it is not a label and field_size id:value pairs; a CSV or TSV
    line when it has another number of columns, or a label or a numeric column that is not a
    number; a Parquet row when it has no label or a number that is not one; any record is bad
    when an id is outside [0, feature_size). `skipped` counts them as they are read
    (a tf.Variable the input pipeline adds to; a cached window is counted once).
    """

    def __init__(self, field_size: int, feature_size: int):
        import tensorflow as tf

        self.field_size, self.feature_size = field_size, feature_size
        self.skipped = tf.Variable(0, dtype=tf.int64, trainable=False, name="bad_records_skipped")

    def well_formed_lines(self, lines):
        import tensorflow as tf

        tokens = tf.strings.split(tf.strings.strip(lines))
        label_ok = tf.reduce_all(tf.ragged.map_flat_values(tf.strings.regex_full_match, tokens[:, :1],
                                                           NUMBER_PATTERN), axis=1)
        pairs_ok = tf.reduce_all(tf.ragged.map_flat_values(tf.strings.regex_full_match, tokens[:, 1:],
                                                           PAIR_PATTERN), axis=1)
        return self._keep(lines, label_ok & pairs_ok & tf.equal(tokens.row_lengths(), self.field_size + 1))

    def well_formed_rows(self, lines, mapping, delimiter: str):
        """CSV or TSV lines with the mapping's columns, a number for a label and a number or
        nothing in each numeric column (fields split at every delimiter: a quoted delimiter
        makes a line look bad)."""
        import tensorflow as tf

        fields = tf.strings.split(lines, delimiter)
        ok = tf.equal(fields.row_lengths(), mapping.width)
        fields = tf.strings.strip(fields.to_tensor(default_value="", shape=[None, mapping.width]))
        ok &= tf.strings.regex_full_match(fields[:, mapping.label.position], NUMBER_PATTERN)
        for column in mapping.numeric:
            value = fields[:, column.position]
            ok &= tf.equal(value, "") | tf.strings.regex_full_match(value, NUMBER_PATTERN)
        return self._keep(lines, ok)

    def labelled_rows(self, columns):
        """Parquet rows the reader marked bad (no label, a number that is not one: a NaN label)."""
        import tensorflow as tf

        return self._keep(columns, tf.logical_not(tf.math.is_nan(columns["label"])))

    def ids_in_range(self, features, label):
        import tensorflow as tf

        ids = features["ids"]
        ok = tf.reduce_all((ids >= 0) & (ids < self.feature_size), axis=1)
        return self._keep((features, label), ok)

    def _keep(self, structure, ok):
        import tensorflow as tf

        self.skipped.assign_add(tf.reduce_sum(tf.cast(tf.logical_not(ok), tf.int64)))
        return tf.nest.map_structure(lambda tensor: tf.boolean_mask(tensor, ok), structure)


def batch_parser(data_format: str, field_size: int, bad_records: BadRecords | None = None):
    """A function from a batch of serialized records (string[batch]) to (features, label).

    Vectorised over the batch (P18: batch, then parse): one op call per batch instead of
    one per record. With `bad_records`, malformed libsvm lines and records with ids out of
    range are dropped and counted instead of failing the job.
    """
    import tensorflow as tf

    if bad_records is not None:
        parse = batch_parser(data_format, field_size)
        if data_format == "libsvm":
            return lambda lines: bad_records.ids_in_range(*parse(bad_records.well_formed_lines(lines)))
        return lambda serialized: bad_records.ids_in_range(*parse(serialized))

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

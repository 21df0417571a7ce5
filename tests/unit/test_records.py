"""Record formats: the Python line parsers, the direct Example encoding, batch parsing."""
import numpy as np
import pytest
import tensorflow as tf

from trainer.data import records


@pytest.mark.parametrize("line, expected", [
    ("1 1:0.5 7:1", (1.0, [1, 7], [0.5, 1.0])),
    ("0\t3:2e-1  9:1\n", (0.0, [3, 9], [0.2, 1.0])),
])
def test_libsvm_line(line, expected):
    assert records.parse_libsvm_line(line, 2, 10) == expected


@pytest.mark.parametrize("line, message", [
    ("1 1:0.5", "expected a label and 2 id:value pairs, found 2 tokens"),
    ("1 1:0.5 2:1 3:1", "found 4 tokens"),
    ("x 1:0.5 2:1", "label 'x' is not a number"),
    ("1 1:0.5 abc", "token 'abc' is not id:value"),
    ("1 1:0.5 2:y", "token '2:y' is not id:value"),
    ("1 1:0.5 a:1", "token 'a:1' is not id:value"),
    ("1 1:0.5 10:1", "id 10 is outside [0, feature_size=10)"),
    ("1 -1:0.5 2:1", "id -1 is outside"),
])
def test_libsvm_line_errors(line, message):
    with pytest.raises(ValueError) as error:
        records.parse_libsvm_line(line, 2, 10)
    assert message in str(error.value)


def test_direct_encoding_matches_tensorflow():
    ids, values = [0, 1, 127, 128, 2**40, 117580], [0.0, 1.5, -2.25, 1e-7, 3.0, 1.0]
    ours = records.encode_example(1.0, ids, values)
    theirs = tf.train.Example(features=tf.train.Features(feature={
        "ids": tf.train.Feature(int64_list=tf.train.Int64List(value=ids)),
        "values": tf.train.Feature(float_list=tf.train.FloatList(value=values)),
        "label": tf.train.Feature(float_list=tf.train.FloatList(value=[1.0])),
    }))
    assert tf.train.Example.FromString(ours) == theirs


def test_batch_parsers_agree_with_the_line_parser():
    rng = np.random.default_rng(0)
    rows = [(float(rng.integers(0, 2)), rng.integers(0, 1000, 5).tolist(), rng.random(5).round(4).tolist())
            for _ in range(20)]
    lines = tf.constant([records.format_libsvm_line(*row) for row in rows])
    serialized = tf.constant([records.encode_example(*row) for row in rows])
    for data_format, batch in (("libsvm", lines), ("tfrecord", serialized)):
        features, labels = records.batch_parser(data_format, 5)(batch)
        assert features["ids"].dtype == tf.int64 and features["values"].dtype == tf.float32
        np.testing.assert_array_equal(features["ids"].numpy(), [r[1] for r in rows])
        np.testing.assert_allclose(features["values"].numpy(), [r[2] for r in rows], rtol=1e-5)
        np.testing.assert_array_equal(labels.numpy()[:, 0], [r[0] for r in rows])


@pytest.mark.parametrize("line", ["1 1:0.5 2:1 3:x 4:1 5:1", "1 1:0.5 2:1", "1 1:0.5 2:1 3 4:1 5:1"])
def test_libsvm_batch_parser_rejects_bad_lines(line):
    with pytest.raises(tf.errors.InvalidArgumentError):
        records.batch_parser("libsvm", 5)(tf.constant([line]))


@pytest.mark.parametrize("line, kept", [
    ("1 1:0.5 2:1 3:2e-3", True),
    ("0 1:.5 2:-1 3:+2", True),
    ("1 1:0.5 2:1", False),  # a field missing
    ("1 1:0.5 2:1 3:1 4:1", False),  # one too many
    ("1 1:0.5 x:1 3:1", False),  # an id that is no number
    ("1 1:0.5 2:abc 3:1", False),  # a value that is no number
    ("yes 1:0.5 2:1 3:1", False),  # a label that is no number
    ("1 1:0.5 2:1 3:1 ", True),  # trailing space
    ("1 1:0.5 2:1 10:1", False),  # id 10 is outside feature_size=10
])
def test_bad_records_are_dropped_and_counted(line, kept):
    bad = records.BadRecords(field_size=3, feature_size=10)
    parse = records.batch_parser("libsvm", 3, bad)
    features, label = parse(tf.constant([line, "1 1:1 2:1 3:1"]))
    assert features["ids"].shape[0] == label.shape[0] == (2 if kept else 1)
    assert int(bad.skipped.numpy()) == (0 if kept else 1)

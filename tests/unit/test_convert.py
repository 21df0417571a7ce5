"""The data tools: convert (round trip, parallel, channels, errors), split and datagen."""
import argparse
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import CRITEO_SAMPLE, shared_file
from trainer.data import convert, datagen, records
from trainer.data.split import split
from trainer.errors import JobError


def read_tfrecords(paths, field_size):
    parse = records.batch_parser("tfrecord", field_size)
    rows = []
    for batch in tf.data.TFRecordDataset(paths).batch(1000):
        features, labels = parse(batch)
        rows += list(zip(labels.numpy()[:, 0].tolist(), features["ids"].numpy().tolist(),
                         features["values"].numpy().tolist()))
    return rows


def write_libsvm(path, rows):
    with open(path, "w") as f:
        for row in rows:
            f.write(records.format_libsvm_line(*row) + "\n")


def random_rows(count, fields=6, seed=0):
    rng = np.random.default_rng(seed)
    return [(float(rng.integers(0, 2)), rng.integers(0, 5000, fields).tolist(),
             rng.random(fields).astype(np.float32).round(5).tolist()) for _ in range(count)]


def test_libsvm_round_trip_in_parallel_keeps_every_row_in_order(tmp_path):
    rows = random_rows(1000)
    write_libsvm(tmp_path / "a.libsvm", rows[:600])
    write_libsvm(tmp_path / "b.libsvm", rows[600:])
    result = convert.convert([str(tmp_path / "a.libsvm"), str(tmp_path / "b.libsvm")], str(tmp_path / "out"),
                             field_size=6, num_files=7, workers=2)
    assert result["input_format"] == "libsvm" and len(result["files"]) == 7 and sum(result["records"]) == 1000
    back = read_tfrecords(result["files"], 6)
    assert [r[0] for r in back] == [r[0] for r in rows]
    assert [r[1] for r in back] == [r[1] for r in rows]
    np.testing.assert_allclose([r[2] for r in back], [r[2] for r in rows], rtol=1e-5)


def test_channels_split_files_round_robin(tmp_path):
    write_libsvm(tmp_path / "a.libsvm", random_rows(100))
    result = convert.convert([str(tmp_path / "a.libsvm")], str(tmp_path / "out"), field_size=6,
                             num_files=4, channels=2, workers=1)
    assert sorted(os.listdir(tmp_path / "out")) == ["training-1", "training-2"]
    assert [len(os.listdir(tmp_path / "out" / c)) for c in ("training-1", "training-2")] == [2, 2]
    assert sum(result["records"]) == 100


def test_raw_criteo_to_tfrecord_and_libsvm():
    source = shared_file(CRITEO_SAMPLE)
    import tempfile

    with tempfile.TemporaryDirectory() as out:
        result = convert.convert([source], os.path.join(out, "tf"), num_files=3, workers=2)
        assert result["input_format"] == "csv" and sum(result["records"]) == 200
        assert result["feature_size"] == 117581 and result["field_size"] == 39
        rows = read_tfrecords(result["files"], 39)
        assert len(rows) == 200 and sum(r[0] for r in rows) == 49  # click rate 0.245
        assert all(r[1][:13] == list(range(13)) for r in rows)
        assert all(13 <= i < 117581 for r in rows for i in r[1][13:])
        text = convert.convert([source], os.path.join(out, "svm"), output_format="libsvm", num_files=1)
        with open(text["files"][0]) as f:
            lines = f.readlines()
        assert [records.parse_libsvm_line(l, 39, 117581)[1] for l in lines] == [r[1] for r in rows]


@pytest.mark.parametrize("data_format", ["csv", "tsv", "tsv.gz", "parquet"])
def test_a_table_converts_to_the_features_training_makes_of_it(tmp_path, data_format):
    """The converted records are the rows as training parses them (the same graph): a model
    trained on either is trained on the same examples."""
    import pyarrow.csv as pcsv
    import pyarrow.parquet as pq

    from trainer.contract.job import Channel
    from trainer.data.pipeline import EpochInput, InputSpec

    table = pcsv.read_csv(shared_file(CRITEO_SAMPLE))
    folder = tmp_path / "in"
    folder.mkdir()
    path = folder / f"day_0.{data_format}"
    if data_format == "parquet":
        pq.write_table(table, path, row_group_size=64)  # four row groups
    else:
        options = pcsv.WriteOptions(include_header=False, delimiter="\t" if "tsv" in data_format else ",",
                                    quoting_style="none")
        pcsv.write_csv(table, tmp_path / "plain", options)
        data = (tmp_path / "plain").read_bytes()
        path.write_bytes(__import__("gzip").compress(data) if data_format.endswith(".gz") else data)
    result = convert.convert([str(path)], str(tmp_path / "out"), num_files=3, workers=2, feature_size=5000)
    assert sum(result["records"]) == 200
    converted = sorted(read_tfrecords(result["files"], 39))
    spec = InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", str(folder))], None)
    parsed = []
    for features, labels in EpochInput(spec, spec.parser(39, 5000), 64).dataset(0):
        parsed += list(zip(labels.numpy()[:, 0].tolist(), features["ids"].numpy().tolist(),
                           features["values"].numpy().tolist()))
    parsed = sorted(parsed)
    assert [(label, ids) for label, ids, _ in converted] == [(label, ids) for label, ids, _ in parsed]
    np.testing.assert_allclose([v for *_, v in converted], [v for *_, v in parsed], rtol=1e-6)


def test_a_bad_row_of_a_table_is_named_by_file_and_line(tmp_path):
    path = tmp_path / "a.csv"
    rows = ["1,2,x,y", "0,,x,"] * 10
    rows[12] = "1,two,x,y"
    path.write_text("\n".join(rows) + "\n")
    spec = convert.ColumnSpec((0,), (1,), (2, 3))
    with pytest.raises(JobError, match=rf"file {path} line 13: Field 1 in record 0 is not a valid float: two"):
        convert.convert([str(path)], str(tmp_path / "out"), column_spec=spec, num_files=2, workers=1)


def test_bad_line_names_file_and_line(tmp_path):
    rows = random_rows(50)
    write_libsvm(tmp_path / "a.libsvm", rows)
    lines = (tmp_path / "a.libsvm").read_text().splitlines()
    lines[36] = lines[36].replace(":", "=", 1)
    (tmp_path / "a.libsvm").write_text("\n".join(lines) + "\n")
    with pytest.raises(JobError) as error:
        convert.convert([str(tmp_path / "a.libsvm")], str(tmp_path / "out"), field_size=6, num_files=3, workers=2)
    assert f"file {tmp_path / 'a.libsvm'} line 37: token" in str(error.value)


def test_a_gzip_compressed_table_converts_as_its_plain_text_does(tmp_path):
    """The advice a channel of raw Criteo .tsv.gz files gets (trainer convert on it) works."""
    import gzip
    import shutil

    source = shared_file(CRITEO_SAMPLE)
    compressed = tmp_path / "day_0.csv.gz"
    with open(source, "rb") as plain, gzip.open(compressed, "wb") as packed:
        shutil.copyfileobj(plain, packed)
    from_plain = convert.convert([source], str(tmp_path / "plain"), num_files=2, workers=2)
    from_gzip = convert.convert([str(compressed)], str(tmp_path / "gz"), num_files=2, workers=2)
    assert from_gzip["input_format"] == "csv" and sum(from_gzip["records"]) == 200
    assert read_tfrecords(from_gzip["files"], 39) == read_tfrecords(from_plain["files"], 39)
    assert sorted(os.listdir(tmp_path / "gz")) == ["part-00000.tfrecord", "part-00001.tfrecord"]  # no temporary left


@pytest.mark.parametrize("content, expected", [
    (None, "file {path} line 37: token"),  # a bad line inside: the compressed file named
    (b"not gzip at all", "file {path}: not readable as gzip"),
])
def test_a_bad_gzip_input_names_the_file_the_user_gave(tmp_path, content, expected):
    import gzip

    path = tmp_path / "a.libsvm.gz"
    if content is None:
        lines = [records.format_libsvm_line(*row) for row in random_rows(50)]
        lines[36] = lines[36].replace(":", "=", 1)
        with gzip.open(path, "wt") as f:
            f.write("\n".join(lines) + "\n")
    else:
        path.write_bytes(content)
    with pytest.raises(JobError) as error:
        convert.convert([str(path)], str(tmp_path / "out"), field_size=6, num_files=2, workers=2)
    assert expected.format(path=path) in str(error.value)
    assert not [name for name in os.listdir(tmp_path / "out") if name.startswith(".decompressed")]


def test_split_copies_records_in_order(tmp_path):
    write_libsvm(tmp_path / "a.libsvm", random_rows(30))
    tf_files = convert.convert([str(tmp_path / "a.libsvm")], str(tmp_path / "tf"), field_size=6, num_files=1)["files"]
    parts = [str(tmp_path / "p1.tfrecord"), str(tmp_path / "p2.tfrecord")]
    assert split(tf_files[0], [20, 10], parts) == [20, 10]
    assert read_tfrecords(parts, 6) == read_tfrecords(tf_files, 6)


def test_datagen_is_seeded_and_independent_of_workers(tmp_path):
    one = datagen.generate(str(tmp_path / "one"), 3000, 500, files=2, workers=1, seed=3)
    two = datagen.generate(str(tmp_path / "two"), 3000, 500, files=2, workers=2, seed=3)
    other = datagen.generate(str(tmp_path / "other"), 3000, 500, files=2, workers=2, seed=4)
    content = lambda result: [open(p, "rb").read() for p in result["files"]]  # noqa: E731
    assert content(one) == content(two) and content(one) != content(other)
    rows = read_tfrecords(one["files"][:2], 39)
    assert len(rows) == 3000 and 0.15 < one["click_rate"] < 0.35
    assert all(r[1][:13] == list(range(1, 14)) and max(r[1]) < 117581 for r in rows)
    text = datagen.generate(str(tmp_path / "svm"), 100, 10, files=1, data_format="libsvm")
    with open(text["files"][0]) as f:
        assert len([records.parse_libsvm_line(l, 39, 117581) for l in f]) == 100


def test_datagen_signal_sets_the_oracle_auc(tmp_path):
    """--signal scales the hidden model: a weaker signal lowers the eval split's oracle AUC
    (the hidden model's own score), the click rate stays Criteo-like, and the default is the
    unscaled model (the same files as before the option)."""
    oracle = {signal: datagen.generate(str(tmp_path / str(signal)), 2000, 20000, files=2, workers=2, seed=5,
                                       feature_size=5721, signal=signal) for signal in (1.0, 0.55)}
    assert 0.88 < oracle[1.0]["oracle_eval_auc"] < 0.95 and 0.78 < oracle[0.55]["oracle_eval_auc"] < 0.86, oracle
    assert all(0.15 < result["click_rate"] < 0.35 for result in oracle.values())
    default = datagen.generate(str(tmp_path / "default"), 2000, 20000, files=2, workers=2, seed=5, feature_size=5721)
    assert [open(p, "rb").read() for p in default["files"]] == [open(p, "rb").read() for p in oracle[1.0]["files"]]
    assert datagen.generate(str(tmp_path / "none"), 100, 0, files=1, workers=1)["oracle_eval_auc"] is None


@pytest.mark.parametrize("text, expected", [("0.55", 0.55), ("1", 1.0), ("0", None), ("-1", None), ("abc", None),
                                            ("nan", None)])
def test_signal_must_be_a_positive_number(text, expected):
    if expected is None:
        with pytest.raises(argparse.ArgumentTypeError, match=f"expected a positive number, got '{text}'"):
            datagen.signal_scale(text)
    else:
        assert datagen.signal_scale(text) == expected


@pytest.mark.parametrize("scores, labels, expected", [
    ([0.1, 0.2, 0.3, 0.4], [0, 0, 1, 1], 1.0),
    ([0.4, 0.3, 0.2, 0.1], [0, 0, 1, 1], 0.0),
    ([0.1, 0.3, 0.2, 0.4], [0, 0, 1, 1], 0.75),
    ([0.1, 0.2], [1, 1], None),
])
def test_rank_auc(scores, labels, expected):
    assert datagen.rank_auc(np.array(scores), np.array(labels, np.float32)) == expected


def test_datagen_signal_is_learnable():
    """The hidden model's own logit separates the labels well: there is signal to learn."""
    model = datagen.HiddenModel.from_seed(7, 117581)
    labels, ids, values = model.sample(np.random.default_rng(0), 20000)
    logit = model.logit(ids[:, 13:], values[:, :13])
    auc = tf.keras.metrics.AUC(num_thresholds=2000)
    auc.update_state(labels, tf.sigmoid(logit))
    assert auc.result() > 0.8

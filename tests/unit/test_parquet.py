"""Reading Parquet: by row group, streams of objects split, every row once across the ranks, bad
files named."""
import gzip
import io
import os
import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import tensorflow as tf

from trainer.contract.job import Channel
from trainer.data import parquet
from trainer.data.check import row_fingerprints
from trainer.data.columns import ColumnSpec
from trainer.data.diagnose import job_error_inside
from trainer.data.fifo import recordio_record
from trainer.data.pipeline import EpochInput, InputSpec, records
from trainer.errors import JobError

SPEC = ColumnSpec(("click",), ("n1", "n2"), ("c1", "c2"))


def table(rows: int, start: int = 0, seed: int = 0, **changes):
    rng = np.random.default_rng(seed)
    columns = {
        "id": pa.array(np.arange(start, start + rows)),  # not trained on
        "click": pa.array(np.arange(start, start + rows) % 2),
        "n1": pa.array(rng.integers(0, 50, rows), mask=rng.random(rows) < 0.2),
        "n2": pa.array(rng.random(rows).astype(np.float32)),
        "c1": pa.array([f"v{i % 7}" for i in range(start, start + rows)]),
        "c2": pa.array(rng.integers(0, 9, rows), mask=rng.random(rows) < 0.1),  # integers: hashed as their text
    }
    columns.update(changes)
    return pa.table(columns)


def write(path, data, row_group_size=100, **options):
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(data, path, row_group_size=row_group_size, **options)
    return str(path)


def read_rows(source, kind="file", spec=SPEC, **options):
    reader = parquet.Reader(source, kind, spec, parquet.Options(**options))
    rows = []
    for label, numeric, blobs, starts, lengths, splits, values in reader.chunks():
        def text(row, column):
            value = splits[column] + values[row, column]
            return bytes(blobs[column][starts[value]:starts[value] + lengths[value]]).decode()
        rows += [(float(label[r]), tuple(numeric[r].tolist()), tuple(text(r, j) for j in range(len(blobs))))
                 for r in range(len(label))]
    return rows


def expected_rows(data):
    rows = []
    for record in data.to_pylist():
        numbers = tuple(float("nan") if record[n] is None else float(np.float32(record[n])) for n in ("n1", "n2"))
        text = tuple("" if record[c] is None else str(record[c]) for c in ("c1", "c2"))
        rows.append((float(record["click"]), numbers, text))
    return rows


def same(rows, expected):
    key = lambda row: (row[0], tuple(np.nan_to_num(row[1], nan=-1.0)), row[2])  # noqa: E731
    return sorted(map(key, rows)) == sorted(map(key, expected))


def test_a_file_is_read_by_row_group_with_its_columns_by_name(tmp_path):
    data = table(350)
    path = write(tmp_path / "a.parquet", data)
    assert pq.ParquetFile(path).metadata.num_row_groups == 4
    assert same(read_rows(path, rows=64), expected_rows(data))


def test_columns_by_position_and_a_dictionary_encoded_file(tmp_path):
    data = table(120)
    data = data.set_column(4, "c1", pa.compute.dictionary_encode(data.column("c1")))
    path = write(tmp_path / "a.parquet", data)
    by_position = read_rows(path, spec=ColumnSpec((1,), (2, 3), (4, 5)))
    assert same(by_position, expected_rows(table(120)))


def objects_stream(paths, recordio=False):
    payloads = [open(p, "rb").read() for p in paths]
    return b"".join(recordio_record(p) for p in payloads) if recordio else b"".join(payloads)


def feed_fifo(path, data):
    os.mkfifo(path)

    def write_all():
        with open(path, "wb") as fifo:
            for start in range(0, len(data), 1 << 16):
                fifo.write(data[start:start + (1 << 16)])

    thread = threading.Thread(target=write_all, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("recordio", [False, True])
def test_objects_streamed_back_to_back_are_split_where_each_ends(tmp_path, recordio):
    tables = [table(rows, start=1000 * i, seed=i) for i, rows in enumerate([5, 300, 1, 150])]
    # A value that holds Parquet's magic, twice: no end of an object there.
    tables[1] = table(300, start=1000, seed=1, c1=pa.array(["PAR1PAR1"] * 300))
    paths = [write(tmp_path / f"{i}.parquet", t, compression="none") for i, t in enumerate(tables)]
    fifo = str(tmp_path / "training_0")
    writer = feed_fifo(fifo, objects_stream(paths, recordio))
    rows = read_rows(fifo, "stream", wait_sec=10, recordio=recordio)
    writer.join()
    assert same(rows, [row for t in tables for row in expected_rows(t)])


def test_a_stream_that_ends_inside_an_object_is_named(tmp_path):
    path = write(tmp_path / "a.parquet", table(50))
    data = objects_stream([path, path])
    stream = io.BytesIO(data[:-30])
    with pytest.raises(JobError, match=r"training_0: the stream ends inside Parquet object 1 \(truncated"):
        list(parquet.objects_in_stream(stream, "training_0"))
    with pytest.raises(JobError, match=r"Parquet object 0 does not start with Parquet's PAR1 magic"):
        list(parquet.objects_in_stream(io.BytesIO(b"1,2,3\n" + data), "training_0"))


def test_a_gzip_compressed_file_is_read_from_memory(tmp_path):
    data = table(200)
    plain = write(tmp_path / "a.parquet", data)
    packed = tmp_path / "a.parquet.gz"
    packed.write_bytes(gzip.compress(open(plain, "rb").read()))
    assert same(read_rows(str(packed)), expected_rows(data))


@pytest.mark.parametrize("change, message", [
    ({"n2": pa.array(["0.5"] * 99 + ["abc"])}, r"file \S+a.parquet row group 0: row 99: column n2 value 'abc' is not a "
                                                r"number"),
    ({"click": pa.array([1] * 50 + [None] * 50)}, r"file \S+a.parquet row group 0: row 50 has no label \(column click "
                                                  r"is missing\); set skip_bad_records=true"),
    ({"c1": pa.array([[1]] * 100)}, r"categorical column c1 is list<\w+: int64>, not text or integers"),
])
def test_bad_values_are_named_by_file_row_and_column(tmp_path, change, message):
    path = write(tmp_path / "a.parquet", table(100, **change))
    with pytest.raises(JobError, match=message):
        read_rows(path)


def test_bad_rows_are_marked_for_skip_bad_records(tmp_path):
    path = write(tmp_path / "a.parquet", table(100, n2=pa.array(["0.5"] * 50 + ["abc"] + ["0.5"] * 49),
                                             click=pa.array([1] * 90 + [None] * 10)))
    labels = [row[0] for row in read_rows(path, skip_bad=True)]
    assert len(labels) == 100 and sum(np.isnan(labels)) == 11


def test_a_missing_column_names_the_file_and_its_columns(tmp_path):
    path = write(tmp_path / "a.parquet", table(10).drop(["n2"]))
    with pytest.raises(JobError, match=r"file \S+a.parquet: it has no column 'n2' \(numeric_columns\); "
                                       r"its columns: id, click, n1, c1, c2"):
        read_rows(path)


@pytest.mark.parametrize("damage", ["truncated", "corrupt footer", "not parquet"])
def test_a_damaged_file_is_named(tmp_path, damage):
    path = write(tmp_path / "a.parquet", table(100))
    data = open(path, "rb").read()
    data = {"truncated": data[:len(data) // 2], "corrupt footer": data[:-12] + b"\xff" * 8 + data[-4:],
            "not parquet": b"label,n1\n1,2\n"}[damage]
    open(path, "wb").write(data)
    with pytest.raises(JobError, match=r"file \S+a.parquet: not a readable Parquet file, truncated or corrupt"):
        read_rows(path)


def test_a_corrupt_row_group_is_named(tmp_path):
    path = write(tmp_path / "a.parquet", table(300), compression="none")
    data = bytearray(open(path, "rb").read())
    start = pq.ParquetFile(path).metadata.row_group(1).column(4).data_page_offset
    data[start:start + 64] = b"\xff" * 64
    open(path, "wb").write(bytes(data))
    with pytest.raises(JobError, match=r"file \S+a.parquet: truncated or corrupt after row (0|100|200) \("):
        read_rows(path)


def channel(path, mode="File", content_type=""):
    return Channel("training", mode, "FullyReplicated", content_type, str(path))


def test_the_pipeline_reads_parquet_through_tensorflow_by_name(tmp_path):
    """In a TensorFlow dataset the reader runs as a named PyFunc (what a parameter-server or
    tf.data service worker calls), its rows sharded as every format's: every row once across
    the ranks, their shares a row apart at most."""
    data = table(500)
    write(tmp_path / "d" / "a.parquet", data.slice(0, 300))
    write(tmp_path / "d" / "b.parquet", data.slice(300))
    seen, shares = [], []
    for index in range(3):
        spec = InputSpec.for_channels([channel(tmp_path / "d")], None, (3, index), column_spec=SPEC)
        share = 0
        for batch in records(spec, 0, 1).batch(1000):
            seen += batch["numeric"].numpy()[:, 1].tolist()  # n2: a value per row
            share += len(batch["label"])
            assert batch["categorical"].dtype == tf.string and batch["numeric"].shape[1] == 2
        shares.append(share)
    assert sorted(seen) == sorted(np.float32(v) for v in data.column("n2").to_pylist())
    assert shares == [167, 167, 166]
    whole = InputSpec.for_channels([channel(tmp_path / "d")], None, column_spec=SPEC)
    assert len(row_fingerprints(next(iter(records(whole, 0, 1).batch(1000)))).numpy()) == 500


def test_a_reader_error_reaches_the_job_named(tmp_path):
    write(tmp_path / "d" / "a.parquet", table(100, n2=pa.array(["x"] * 100)))
    spec = InputSpec.for_channels([channel(tmp_path / "d")], None, column_spec=SPEC)
    epoch = EpochInput(spec, spec.parser(4, 100), 32)
    with pytest.raises(tf.errors.OpError) as error:
        list(epoch.dataset(0))
    assert "row 0: column n2 value 'x' is not a number" in str(job_error_inside(error.value))


def test_values_hashed_as_read_get_the_ids_their_strings_get(tmp_path):
    """Each distinct value hashed once as the reader reads it (training's way) and every row's
    string hashed in the parse (a CSV's way): the same ids."""
    write(tmp_path / "d" / "a.parquet", table(300))
    as_read = InputSpec.for_channels([channel(tmp_path / "d")], None, column_spec=SPEC, feature_size=1000)
    as_strings = InputSpec.for_channels([channel(tmp_path / "d")], None, column_spec=SPEC)
    ids = [np.concatenate([features["ids"].numpy() for features, _ in EpochInput(spec, spec.parser(4, 1000), 64)
                           .dataset(0)]) for spec in (as_read, as_strings)]
    assert ids[0].shape == (300, 4) and (ids[0] == ids[1]).all()

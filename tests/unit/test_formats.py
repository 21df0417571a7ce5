"""Which format a channel holds: the hyperparameter, the ContentType, the suffix, the content."""
import gzip
import struct

import pytest

from trainer.contract.job import Channel
from trainer.data import formats
from trainer.data.records import encode_example
from trainer.errors import JobError


def channel(content_type="", mode="File"):
    return Channel("training", mode, "FullyReplicated", content_type, "/x")


def tfrecord_bytes():
    import tensorflow as tf  # TensorFlow's own framing, to hold the sniffer's checksum to it
    import tempfile, os

    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "r")
        with tf.io.TFRecordWriter(path) as writer:
            writer.write(encode_example(1.0, [1, 2], [1.0, 1.0]))
        return open(path, "rb").read()


CONTENTS = {
    "criteo.tsv": b"1\t5\t\t68fd1e64\n0\t2\t3\t\n",
    "criteo.csv": b"label,I1,C1\n1,5,68fd1e64\n",
    "svm": b"1 1:0.5 7:1\n0 3:1 9:0.25\n",
    "parquet": b"PAR1" + b"\0" * 20,
    "junk": b"just some words\n",
    "gzip cut short": gzip.compress(b"label,I1,C1\n1,5,68fd1e64\n")[:12],
}


@pytest.mark.parametrize("requested, names, content_type, expected", [
    ("libsvm", ["a.tfrecord"], "", "libsvm"),  # the hyperparameter first
    (None, ["a.csv"], "text/libsvm", "libsvm"),  # then the ContentType
    (None, [], "text/csv", "csv"),  # Pipe mode: no files, the ContentType
    (None, [], "text/csv;label_size=1", "csv"),  # as AWS's algorithms write it
    (None, [], "text/csv; header=present", "csv"),
    (None, [], "application/x-parquet", "parquet"),
    (None, [], "application/vnd.apache.parquet", "parquet"),
    (None, [], "text/tab-separated-values", "tsv"),
    (None, [], "application/x-tfrecord", "tfrecord"),
    (None, [], "", "tfrecord"),  # Pipe mode, nothing said: TFRecord, as PipeModeDataset reads
    (None, ["a.tfrecord", "b.tfrecords"], "", "tfrecord"),  # then the suffix
    (None, ["day_0.tsv.gz", "day_1.tsv"], "", "tsv"),
    (None, ["part-0.parquet", "part-1.snappy.parquet"], "", "parquet"),
    (None, ["a.libsvm"], "application/octet-stream", "libsvm"),  # a generic ContentType says nothing
    (None, ["criteo.tsv"], "", "tsv"),
    (None, ["train.txt=criteo.tsv"], "", "tsv"),  # Criteo's train.txt is TSV: its content tells
    (None, ["day_0.txt=svm"], "", "libsvm"),
    (None, ["part-00000=parquet"], "", "parquet"),  # S3 object names without a suffix
    (None, ["part-00000=criteo.csv"], "", "csv"),
    (None, ["part-00000=tfrecord"], "", "tfrecord"),
    (None, ["part-00000.gz=gzip:criteo.tsv"], "", "tsv"),
])
def test_format_resolution(tmp_path, requested, names, content_type, expected):
    files = []
    for name in names:
        name, _, content = name.partition("=")
        data = tfrecord_bytes() if content == "tfrecord" else CONTENTS.get(content.removeprefix("gzip:"), b"")
        path = tmp_path / name
        path.write_bytes(gzip.compress(data) if content.startswith("gzip:") else data)
        files.append(str(path))
    resolved = formats.resolve_format(requested, channel(content_type), files)
    assert resolved.data_format == expected and resolved.why


@pytest.mark.parametrize("names, content_type, message", [
    (["a.tfrecord", "b.parquet"], "", r"channel 'training' mixes formats: a.tfrecord is TFRecord \(its name ends in "
                                      r"\.tfrecord\); b.parquet is Parquet"),
    (["part-0=junk"], "", r"file \S+part-0: its format cannot be told from its name or content \(its first line "
                          r"\('just some words'\) is neither libsvm, tab- nor comma-separated; tried Parquet's PAR1"),
    (["part-0=gzip cut short"], "", r"file \S+part-0: gzip-compressed, but cannot be "
                                    r"decompressed \(Compressed file ended before the end-of-stream marker"),
    ([], "application/x-recordio-protobuf", r"channel 'training': ContentType 'application/x-recordio-protobuf' is "
                                            r"not a format the built-in model reads; it reads application/x-parquet, "
                                            r"application/x-tfrecord, text/csv"),
    ([], "text/csv;label_size=2", "label_size=2; the built-in model trains on one label column"),
])
def test_what_cannot_be_read_is_named(tmp_path, names, content_type, message):
    files = []
    for name in names:
        name, _, content = name.partition("=")
        (tmp_path / name).write_bytes(CONTENTS.get(content, b""))
        files.append(str(tmp_path / name))
    with pytest.raises(JobError, match=message):
        formats.resolve_format(None, channel(content_type), files)


@pytest.mark.parametrize("text, expected", [
    ("text/csv", formats.ContentType("csv")),
    ("TEXT/CSV; header=present", formats.ContentType("csv", header=True)),
    ("text/csv;header=absent;label_size=1", formats.ContentType("csv", header=False, label_size=1)),
    ("", formats.ContentType(None)),
    ("application/x-sagemaker-default", formats.ContentType(None)),
])
def test_content_type_parameters(text, expected):
    assert formats.ContentType.parse(text, "training") == expected


def test_the_tfrecord_sniffer_checks_the_length_checksum():
    framed = tfrecord_bytes()
    assert formats.format_of_content(framed)[0] == "tfrecord"
    damaged = struct.pack("<Q", 40) + framed[8:]  # another length: its checksum no longer holds
    assert formats.format_of_content(damaged)[0] != "tfrecord"


@pytest.mark.parametrize("content, header, names, width", [
    ("label,I1,C1\n1,2,x\n", None, ("label", "I1", "C1"), 3),  # the label column is not a number: a header
    ("1,2,x\n0,3,y\n", None, None, 3),
    ('"label","I1"\n1,2\n', None, ("label", "I1"), 2),  # quoted, as pyarrow and Spark write them
    ("1,2,x\n", True, ("1", "2", "x"), 3),  # header=present says so
    ("label,I1\n", False, None, 2),  # header=absent: the first line is a row (its label is then bad)
])
def test_table_header(tmp_path, content, header, names, width):
    path = tmp_path / "a.csv"
    path.write_text(content)
    found = formats.table_header(str(path), "csv", header, 0)
    assert (found.names, found.width) == (names, width)


@pytest.mark.parametrize("name, content", [
    ("day.csv.gz", "gzip cut short"),  # its format by its name, its header unreadable
    ("part-0", "junk"),  # its format by its content, which tells none
])
def test_a_file_that_cannot_be_placed_is_named_with_its_channel(tmp_path, name, content):
    from trainer.data.pipeline import InputSpec

    (tmp_path / name).write_bytes(CONTENTS[content])
    with pytest.raises(JobError, match=rf"^channel 'training': file {tmp_path}/{name}: "):
        InputSpec.for_channels([Channel("training", "File", "FullyReplicated", "", str(tmp_path))], None)

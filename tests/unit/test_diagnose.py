"""What the diagnosis of a TFRecord file says of it where it is cut short: TensorFlow itself
reads a record header cut short as the file's end, so the records' framing must account for
every byte of the file."""
import re

import pytest

from conftest import AWS_DEEPFM, shared_file
from trainer.data import diagnose


def first_record_size(data: bytes) -> int:
    return 16 + int.from_bytes(data[:8], "little")


@pytest.mark.parametrize("cut, expected", [
    (lambda first: 1, r"is truncated after record 0: its last 1 bytes are the start of a record cut short$"),
    (lambda first: 11, r"is truncated after record 0: its last 11 bytes are the start of a record cut short$"),
    (lambda first: first, None),  # one whole record
    (lambda first: first + 5, r"is truncated after record 1: its last 5 bytes are the start of a record cut short$"),
    (lambda first: first + 20, r"is truncated or corrupt after record 1: truncated record at "),  # inside its data
    (lambda first: None, None),  # the whole file
], ids=["inside the first header", "the first header less a byte", "at a record's end", "inside a later header",
        "inside a record's data", "whole"])
def test_a_tfrecord_file_cut_short_is_found_wherever_it_is_cut(tmp_path, cut, expected):
    data = open(shared_file(AWS_DEEPFM), "rb").read()
    at = cut(first_record_size(data))
    path = tmp_path / "part.tfrecords"
    path.write_bytes(data[:at])
    problem = diagnose._scan_tfrecord(str(path), 39, 117581)
    if expected is None:
        assert problem is None
    else:
        assert problem.startswith(f"file {path} ") and re.search(expected, problem), problem

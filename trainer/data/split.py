"""`trainer split`: cut record files into consecutive parts by record counts, in file order.

    trainer split val.tfrecords --counts 8000,2000 --outputs train.tfrecords,eval.tfrecords

TFRecord records are copied byte for byte (framing and CRCs kept); text (libsvm, CSV, TSV) by line.
"""
from __future__ import annotations

import argparse
import os

from trainer.data.formats import format_of_file


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("input", help="a TFRecord or libsvm file")
    parser.add_argument("--counts", required=True, help="records per part, e.g. 8000,2000")
    parser.add_argument("--outputs", required=True, help="one output path per count")


def _records(path: str):
    if format_of_file(path)[0] != "tfrecord":  # text: a record a line
        with open(path, "rb") as f:
            yield from (line for line in f if line.strip())
        return
    import struct

    with open(path, "rb") as f:
        while header := f.read(12):
            (length,) = struct.unpack("<Q", header[:8])
            yield header + f.read(length + 4)


def split(path: str, counts: list[int], outputs: list[str]) -> list[int]:
    """Write consecutive parts; returns the records written to each."""
    if len(counts) != len(outputs):
        raise ValueError("give one output per count")
    written = [0] * len(counts)
    records = _records(path)
    for index, (count, output) in enumerate(zip(counts, outputs)):
        os.makedirs(os.path.dirname(os.path.abspath(output)), exist_ok=True)
        with open(output, "wb") as out:
            for record in records:
                out.write(record)
                written[index] += 1
                if written[index] == count:
                    break
    return written


def main(args: argparse.Namespace) -> int:
    counts = [int(c) for c in args.counts.split(",")]
    outputs = args.outputs.split(",")
    written = split(args.input, counts, outputs)
    for output, count in zip(outputs, written):
        print(f"{output}: {count} records")
    return 0 if written == counts else 1

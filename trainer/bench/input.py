"""Records per second of the input pipeline alone (no training), side by side.

TFRecord against libsvm text, many records parsed at once (the project's pipeline: a window
of `shuffle_buffer` records parsed in one call, in blocks end to end) against one record at a
time (shuffle, parse each, then batch), File against Pipe mode (a FIFO
fed as SageMaker's agent does, read by the project's reader), and a cached pass (P18, P19,
P24). Every case iterates the same generated data through the same pipeline code as a job
(shuffle buffer and batch size of the defaults); the cases run in interleaved rounds and
the figure is the median round.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import tempfile
import time

from trainer.bench.common import generated_spec, interleaved
from trainer.contract.hyperparameters import SPEC_BY_NAME

CASES = ("tfrecord-batch", "tfrecord-record", "libsvm-batch", "libsvm-record", "tfrecord-batch-cached",
         "tfrecord-batch-pipe")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=SPEC_BY_NAME["batch_size"].default)
    parser.add_argument("--shuffle-buffer", type=int, default=SPEC_BY_NAME["shuffle_buffer"].default)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))


def per_record_parser(data_format: str, field_size: int):
    """The pattern P18 warns against: parse each record alone, batch afterwards. It reuses
    the batch parser on a batch of one, so the two differ only in where the batching is."""
    import tensorflow as tf

    from trainer.data.records import batch_parser

    parse_batch = batch_parser(data_format, field_size)

    def parse_one(record):
        features, label = parse_batch(tf.expand_dims(record, 0))
        return {key: value[0] for key, value in features.items()}, label[0]

    return parse_one


class Case:
    """One pipeline to time: `next_pass()` gives the dataset of its next pass."""

    def __init__(self, name: str, spec, args):
        from trainer.data.pipeline import EpochInput, records
        from trainer.data.records import batch_parser

        self.name = name
        field_size = SPEC_BY_NAME["field_size"].default
        per_record = name.split("-")[1] == "record"
        self.input = EpochInput(spec, batch_parser(spec.data_format, field_size), args.batch_size,
                                args.shuffle_buffer, seed=0, cache=name.endswith("cached"))
        self.pass_index = 0
        if per_record:
            import tensorflow as tf

            parse_one = per_record_parser(spec.data_format, field_size)
            self.dataset = (records(spec, 0, 60.0)
                            .shuffle(args.shuffle_buffer, seed=0)
                            .map(parse_one, num_parallel_calls=tf.data.AUTOTUNE)
                            .batch(args.batch_size)
                            .prefetch(tf.data.AUTOTUNE))
        else:
            self.dataset = None

    def next_pass(self):
        dataset = self.dataset if self.dataset is not None else self.input.dataset(self.pass_index)
        self.pass_index += 1
        return dataset


def count_records(dataset) -> int:
    records = 0
    for _, labels in dataset:
        records += int(labels.shape[0])
    return records


def records_per_sec(case: Case) -> float:
    started = time.perf_counter()
    return count_records(case.next_pass()) / (time.perf_counter() - started)


def run(args: argparse.Namespace) -> dict:
    from trainer.local.runner import PipeFeeder

    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="trainer-bench-input-") as folder:
        specs = {data_format: generated_spec(folder, args.rows, data_format, args.files)
                 for data_format in ("tfrecord", "libsvm")}
        feeders = []
        built = {}
        for name in cases:
            spec = specs[name.split("-")[0]]
            if name.endswith("pipe"):
                fifo_prefix = os.path.join(folder, f"{name}-fifo", "training")
                os.makedirs(os.path.dirname(fifo_prefix))
                feeder = PipeFeeder(fifo_prefix, list(spec.files))
                feeder.start()
                feeders.append(feeder)
                pipe = dataclasses.replace(spec.channels[0], input_mode="Pipe", path=fifo_prefix)
                spec = dataclasses.replace(spec, channels=(pipe,), files=())
            built[name] = Case(name, spec, args)
            if name.endswith("cached"):
                count_records(built[name].next_pass())  # fills the cache: later passes read memory
        try:
            medians = interleaved({name: (lambda case=case: records_per_sec(case)) for name, case in built.items()},
                                  args.rounds)
        finally:
            for feeder in feeders:
                feeder.stop()
    rows = [{"case": name, "records_per_sec": round(medians[name], 1)} for name in cases]
    rates = {row["case"]: row["records_per_sec"] for row in rows}
    ratios = {}
    for data_format in ("tfrecord", "libsvm"):
        if f"{data_format}-batch" in rates and f"{data_format}-record" in rates:
            ratios[f"{data_format}_batch_over_record"] = round(
                rates[f"{data_format}-batch"] / rates[f"{data_format}-record"], 2)
    if "tfrecord-batch" in rates and "libsvm-batch" in rates:
        ratios["tfrecord_over_libsvm"] = round(rates["tfrecord-batch"] / rates["libsvm-batch"], 2)
    return {"benchmark": "input", "rows": rows, "ratios": ratios, "records": args.rows,
            "batch_size": args.batch_size, "shuffle_buffer": args.shuffle_buffer, "rounds": args.rounds}


DESCRIPTIONS = {
    "tfrecord-batch": "TFRecord, File, the pipeline: a window parsed at once",
    "tfrecord-record": "TFRecord, File, parse each record then batch",
    "libsvm-batch": "libsvm text, File, the pipeline: a window parsed at once",
    "libsvm-record": "libsvm text, File, parse each record then batch",
    "tfrecord-batch-cached": "TFRecord, File, the pipeline from its in-memory cache (a later epoch)",
    "tfrecord-batch-pipe": "TFRecord, Pipe (FIFO), the pipeline on the project's reader",
}


def table(result: dict) -> str:
    lines = ["case | what | records/s", "--- | --- | ---"]
    for row in result["rows"]:
        lines.append(f"{row['case']} | {DESCRIPTIONS[row['case']]} | {row['records_per_sec']:,.0f}")
    lines.append("")
    lines += [f"- {key.replace('_', ' ')}: {value}x" for key, value in result["ratios"].items()]
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    return [Chart("input", "Input pipeline alone", "records/s", [row["case"] for row in result["rows"]],
                  [row["records_per_sec"] for row in result["rows"]], highlight=["tfrecord-batch"],
                  note="Batch then parse (P18) against parse then batch; TFRecord against libsvm text.")]

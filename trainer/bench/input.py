"""Records per second of the input pipeline alone, and of training end to end, per format.

The input pipeline alone (no training): TFRecord against libsvm text, many records parsed at
once (the project's pipeline: a window of `shuffle_buffer` records parsed in one call, in
blocks end to end) against one record at a time (shuffle, parse each, then batch), File
against Pipe mode (a FIFO fed as SageMaker's agent does, read by the project's reader), a
cached pass (P18, P19, P24), and click logs as they land: CSV, gzip-compressed TSV and
Parquet, their columns mapped and hashed in the graph. Every case iterates the same
generated rows through the same pipeline code as a job (shuffle buffer and batch size of the
defaults); the cases run in interleaved rounds and the figure is the median round.

Training end to end: `trainer local` jobs of the built-in model on one host, the same rows in
each format (TFRecord and libsvm converted from the Parquet rows by `trainer convert`: the very
same features), with the input cache off (every epoch reads and parses its format) and at its
default (the parsed rows cached after the first epoch, where they fit); their samples/s (the
job's metrics) in interleaved rounds, and each format's against TFRecord's. Then the peak memory (RSS) of such a job, one epoch, on a small and a large Parquet
input: reading by row group keeps it flat.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import subprocess
import sys
import tempfile
import time

from trainer.bench.common import generated_data, generated_spec, interleaved
from trainer.contract.hyperparameters import SPEC_BY_NAME

CASES = ("tfrecord-batch", "tfrecord-record", "libsvm-batch", "libsvm-record", "tfrecord-batch-cached",
         "tfrecord-batch-pipe", "csv-batch", "tsv.gz-batch", "parquet-batch")
TRAIN_FORMATS = ("tfrecord", "libsvm", "csv", "tsv.gz", "parquet")
SAMPLE_ROWS = 100_000  # datagen's rows as Parquet, written once to learn their bytes a row


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=SPEC_BY_NAME["batch_size"].default)
    parser.add_argument("--shuffle-buffer", type=int, default=SPEC_BY_NAME["shuffle_buffer"].default)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--train-rows", type=int, default=200_000, help="rows of each end-to-end job (0: none)")
    parser.add_argument("--train-formats", default=",".join(TRAIN_FORMATS))
    parser.add_argument("--train-batch-size", type=int, default=1024)
    parser.add_argument("--train-cache", default="false,auto", help="the jobs' cache_input settings")
    parser.add_argument("--rss-mb", default="100,2000",
                        help="Parquet inputs (MB, comma-separated) whose jobs' peak memory is measured (empty: none)")


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

        self.name = name
        field_size, feature_size = SPEC_BY_NAME["field_size"].default, SPEC_BY_NAME["feature_size"].default
        per_record = name.split("-")[1] == "record"
        self.input = EpochInput(spec, spec.parser(field_size, feature_size), args.batch_size,
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


def pipeline_rates(args, folder: str) -> dict:
    from trainer.local.runner import PipeFeeder

    cases = args.cases.split(",")
    specs = {data_format: generated_spec(folder, args.rows, data_format, args.files)
             for data_format in {name.split("-")[0] for name in cases}}
    feeders, built = [], {}
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
        return interleaved({name: (lambda case=case: records_per_sec(case)) for name, case in built.items()},
                           args.rounds)
    finally:
        for feeder in feeders:
            feeder.stop()


def training_data(args, folder: str) -> dict:
    """{format: its training and evaluation folders}: the same rows in each format."""
    from trainer.data import convert

    formats = args.train_formats.split(",")
    rows = {"train": args.train_rows, "eval": max(1, args.train_rows // 10)}
    parquet = generated_data(folder, rows["train"], "parquet", args.files, rows["eval"])
    data = {"parquet": {"training": parquet["train"], "evaluation": parquet["eval"]}}
    for data_format in formats:
        if data_format in ("tfrecord", "libsvm"):  # converted from the Parquet rows: their very features
            data[data_format] = {}
            for channel, source in data["parquet"].items():
                out = os.path.join(folder, data_format, channel)
                files = sorted(os.path.join(source, name) for name in os.listdir(source))
                convert.convert(files, out, output_format=data_format, num_files=len(files))
                data[data_format][channel] = out
        elif data_format != "parquet":
            generated = generated_data(folder, rows["train"], data_format, args.files, rows["eval"])
            data[data_format] = {"training": generated["train"], "evaluation": generated["eval"]}
    return {data_format: data[data_format] for data_format in formats}


def job_command(job_dir: str, channels: dict, hyperparameters: dict) -> list[str]:
    command = [sys.executable, "-m", "trainer", "local", "--job-dir", job_dir]
    for name, path in channels.items():
        command += ["--channel", f"{name}={path}"]
    for key, value in hyperparameters.items():
        command += ["--hp", f"{key}={value}"]
    return command


def run_job(job_dir: str, channels: dict, hyperparameters: dict) -> tuple[dict, float]:
    """A `trainer local` job of its own: (its metrics, the peak RSS in MB of its largest process)."""
    from trainer.report import read_metrics

    process = subprocess.Popen(job_command(job_dir, channels, hyperparameters), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    output = process.stdout.read()
    _, status, usage = os.wait4(process.pid, 0)  # the job's own children's peak, not this process's
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode:
        raise RuntimeError(f"bench input: the job in {job_dir} failed:\n{output[-3000:]}")
    return read_metrics(os.path.join(job_dir, "output", "data")), usage.ru_maxrss / 1024


def training_rates(args, folder: str) -> dict:
    """{(format, cache_input): median samples/s over the rounds} of one-host jobs of 2 epochs:
    each input cache setting of --train-cache (false: every epoch parses its format; auto, the
    default: the parsed rows are cached after the first epoch, where they fit)."""
    data = training_data(args, folder)
    counter = iter(range(1 << 30))

    def measure(data_format, cache):
        job_dir = os.path.join(folder, "jobs", f"{data_format}-{cache}-{next(counter)}")
        metrics, _ = run_job(job_dir, data[data_format], {"num_epochs": 2, "batch_size": args.train_batch_size,
                                                          "cache_input": cache})
        return metrics["train_samples_per_sec"]

    cases = {(f, cache): (lambda f=f, cache=cache: measure(f, cache))
             for cache in args.train_cache.split(",") for f in data}
    return interleaved(cases, args.rounds)


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(folder, name)) for name in os.listdir(folder))


def peak_memory(args, folder: str) -> list[dict]:
    """Per Parquet input size: one epoch's peak RSS (MB) of its job, cache off."""
    rows = []
    sizes = [float(size) for size in args.rss_mb.split(",") if size.strip()]
    if sizes:
        sample = generated_data(os.path.join(folder, "sample"), SAMPLE_ROWS, "parquet", 1)
        bytes_per_row = folder_bytes(sample["train"]) / SAMPLE_ROWS
    for megabytes in sizes:
        count = int(megabytes * 1e6 / bytes_per_row)
        data = generated_data(os.path.join(folder, f"rss-{megabytes:g}"), count, "parquet", args.files, 1000)
        size = folder_bytes(data["train"])
        metrics, peak = run_job(os.path.join(folder, f"rss-{megabytes:g}-job"),
                                {"training": data["train"], "evaluation": data["eval"]},
                                {"num_epochs": 1, "batch_size": args.train_batch_size, "cache_input": "false"})
        rows.append({"input_mb": round(size / 1e6, 1), "rows": count, "peak_rss_mb": round(peak, 1),
                     "samples_per_sec": metrics["train_samples_per_sec"]})
    return rows


def run(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainer-bench-input-") as folder:
        medians = pipeline_rates(args, os.path.join(folder, "pipeline"))
        training = training_rates(args, os.path.join(folder, "training")) if args.train_rows else {}
        memory = peak_memory(args, os.path.join(folder, "memory"))
    rows = [{"case": name, "records_per_sec": round(medians[name], 1)} for name in args.cases.split(",")]
    rates = {row["case"]: row["records_per_sec"] for row in rows}
    ratios = {}
    for data_format in ("tfrecord", "libsvm"):
        if f"{data_format}-batch" in rates and f"{data_format}-record" in rates:
            ratios[f"{data_format}_batch_over_record"] = round(
                rates[f"{data_format}-batch"] / rates[f"{data_format}-record"], 2)
    if "tfrecord-batch" in rates and "libsvm-batch" in rates:
        ratios["tfrecord_over_libsvm"] = round(rates["tfrecord-batch"] / rates["libsvm-batch"], 2)
    trained = [{"format": f, "cache_input": cache, "samples_per_sec": round(rate, 1),
                "of_tfrecord": round(rate / training[("tfrecord", cache)], 3) if ("tfrecord", cache) in training
                else None} for (f, cache), rate in training.items()]
    result = {"benchmark": "input", "rows": rows, "ratios": ratios, "records": args.rows,
              "batch_size": args.batch_size, "shuffle_buffer": args.shuffle_buffer, "rounds": args.rounds,
              "training": trained, "training_rows": args.train_rows, "training_batch_size": args.train_batch_size,
              "memory": memory}
    if len(memory) > 1:
        result["memory_largest_over_smallest"] = round(memory[-1]["peak_rss_mb"] / memory[0]["peak_rss_mb"], 3)
    return result


DESCRIPTIONS = {
    "tfrecord-batch": "TFRecord, File, the pipeline: a window parsed at once",
    "tfrecord-record": "TFRecord, File, parse each record then batch",
    "libsvm-batch": "libsvm text, File, the pipeline: a window parsed at once",
    "libsvm-record": "libsvm text, File, parse each record then batch",
    "tfrecord-batch-cached": "TFRecord, File, the pipeline from its in-memory cache (a later epoch)",
    "tfrecord-batch-pipe": "TFRecord, Pipe (FIFO), the pipeline on the project's reader",
    "csv-batch": "raw Criteo columns as CSV, File: decoded, hashed and transformed a window at once",
    "tsv.gz-batch": "raw Criteo columns as gzip-compressed TSV, File",
    "parquet-batch": "raw Criteo columns as Parquet, File: read by row group, hashed in the graph",
}


def table(result: dict) -> str:
    lines = ["case | what | records/s", "--- | --- | ---"]
    for row in result["rows"]:
        lines.append(f"{row['case']} | {DESCRIPTIONS[row['case']]} | {row['records_per_sec']:,.0f}")
    lines.append("")
    lines += [f"- {key.replace('_', ' ')}: {value}x" for key, value in result["ratios"].items()]
    if result["training"]:
        lines += ["", f"Training end to end (one host, built-in DeepFM, {result['training_rows']:,} rows, 2 epochs, "
                      f"batch {result['training_batch_size']}):", "",
                  "format | cache_input | samples/s | of TFRecord's", "--- | --- | --- | ---"]
        lines += [f"{row['format']} | {row['cache_input']} | {row['samples_per_sec']:,.0f} | {row['of_tfrecord']}"
                  for row in result["training"]]
    if result["memory"]:
        lines += ["", "Peak memory of a job on Parquet (one epoch, cache off):", "",
                  "input MB | rows | peak RSS MB | samples/s", "--- | --- | --- | ---"]
        lines += [f"{row['input_mb']:,} | {row['rows']:,} | {row['peak_rss_mb']:,} | {row['samples_per_sec']:,.0f}"
                  for row in result["memory"]]
        if "memory_largest_over_smallest" in result:
            lines.append(f"\n- largest input's peak RSS over the smallest's: {result['memory_largest_over_smallest']}x")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    made = [Chart("input", "Input pipeline alone", "records/s", [row["case"] for row in result["rows"]],
                  [row["records_per_sec"] for row in result["rows"]], highlight=["tfrecord-batch"],
                  note="Batch then parse (P18) against parse then batch; TFRecord, libsvm, CSV, TSV.gz, Parquet.")]
    if result["training"]:
        made.append(Chart("input-training", "Training end to end, per format", "samples/s",
                          [f"{row['format']}, cache {row['cache_input']}" for row in result["training"]],
                          [row["samples_per_sec"] for row in result["training"]],
                          highlight=[f"tfrecord, cache {row['cache_input']}" for row in result["training"]],
                          note="The same rows; cache false: every epoch parses its format; auto: the first."))
    return made

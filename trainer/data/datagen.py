"""`trainer datagen`: a seeded synthetic Criteo-like dataset with a learnable signal.

    trainer datagen --output data/ --train-rows 1000000 --eval-rows 100000 --files 8
    trainer datagen --output logs/ --format parquet        # the same rows as raw Criteo columns

Rows have the DeepFM layout: 13 continuous fields (ids 1..13, values in [0, 1]) and 26
categorical fields whose ids are drawn with a Zipf-like skew from each field's own id
range, like Criteo's. Labels come from a hidden factorization machine (a weight per id,
a factor vector per id, weights on the continuous values) plus noise, with a click rate
near Criteo's 25%: a model that learns first- and second-order effects scores well above
AUC 0.5, and the same seed always gives the same files, however many workers write them.
As CSV, TSV or Parquet the same rows are raw Criteo columns, as click logs land: `label`,
`I1..I13` integer counts (the continuous value v as round(e^(6 v) - 1), empty where v is 0,
Criteo's missing), `C1..C26` 8-hex-digit values (one per id), which the built-in model hashes
in the graph (trainer.data.raw_features).
`--signal` scales the hidden model's terms (below 1: noisier labels, a lower ceiling); the
summary line gives the eval split's oracle AUC, the hidden model's own score, which no
model trained on the data can beat on average.
"""
from __future__ import annotations

import argparse
import os
from dataclasses import dataclass

import numpy as np

from trainer.data import formats, pools, records

CONTINUOUS = records.CRITEO_CONTINUOUS
CATEGORICAL = records.CRITEO_CATEGORICAL
FACTORS = 4
ZIPF_POWER = 3.0  # rank = vocabulary * u**power: most rows use a field's first ids
ROWS_PER_BLOCK = 8192
SIGNAL_HALF_RANK = 100.0
FIRST_ORDER_SCALE = 0.35
COUNT_SCALE = 6.0  # a raw count is round(e^(COUNT_SCALE v) - 1)
SUFFIXES = {"tfrecord": ".tfrecord", "libsvm": ".libsvm", "csv": ".csv", "tsv": ".tsv", "parquet": ".parquet"}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--output", required=True, help="folder; gets train/ and eval/ subfolders")
    parser.add_argument("--train-rows", type=int, default=200_000)
    parser.add_argument("--eval-rows", type=int, default=50_000)
    parser.add_argument("--files", type=int, default=2, help="files per split")
    parser.add_argument("--format", choices=formats.FORMATS, default="tfrecord")
    parser.add_argument("--header", action="store_true", help="csv, tsv: a header line (label, I1.., C1..) first")
    parser.add_argument("--row-group-rows", type=int, default=65536, help="parquet: rows per row group")
    parser.add_argument("--feature-size", type=int, default=117581)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--signal", type=signal_scale, default=1.0,
                        help="scale of the hidden model's terms: 0.55 with 5721 ids gives an oracle AUC near 0.82")
    parser.add_argument("--workers", type=int, default=os.cpu_count())


def signal_scale(text: str) -> float:
    """An argparse type for --signal (here and in `bench modes`): a positive number."""
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}")
    return value


@dataclass(frozen=True)
class HiddenModel:
    """The ground truth the labels come from."""

    vocab_offsets: np.ndarray  # first id of each categorical field
    vocab_sizes: np.ndarray
    id_weights: np.ndarray  # [feature_size]
    id_factors: np.ndarray  # [feature_size, FACTORS]
    continuous_weights: np.ndarray  # [CONTINUOUS]
    bias: float
    signal: float = 1.0  # scale of the first- and second-order terms (0.55: a click rate near 20%)

    @staticmethod
    def from_seed(seed: int, feature_size: int, signal: float = 1.0) -> "HiddenModel":
        first = records.CRITEO_FIRST_CATEGORICAL_ID
        if feature_size < first + CATEGORICAL * 2:
            raise ValueError(f"feature_size must be at least {first + CATEGORICAL * 2}")
        rng = np.random.default_rng([seed, 0])
        # Frequent ids carry the signal, rare ones little (as in real click logs), so a
        # model can learn it from a modest sample rather than only memorise rare ids.
        # Field vocabularies of very different sizes (as in Criteo), filling the id space.
        shares = rng.pareto(1.0, CATEGORICAL) + 0.05
        sizes = np.maximum(2, np.floor(shares / shares.sum() * (feature_size - first))).astype(np.int64)
        sizes[-1] = feature_size - first - sizes[:-1].sum()
        offsets = first + np.concatenate([[0], np.cumsum(sizes)[:-1]])
        rank = np.zeros(feature_size)
        for offset, size in zip(offsets, sizes):
            rank[offset:offset + size] = np.arange(size)
        id_signal = 1.0 / np.sqrt(1.0 + rank / SIGNAL_HALF_RANK)
        return HiddenModel(
            vocab_offsets=offsets,
            vocab_sizes=sizes,
            id_weights=rng.normal(0.0, 0.7, feature_size) * id_signal,
            id_factors=rng.normal(0.0, 0.3, (feature_size, FACTORS)) * id_signal[:, None],
            continuous_weights=rng.normal(0.0, 1.5, CONTINUOUS),
            bias=-1.9,
            signal=signal,
        )

    def logit(self, categorical: np.ndarray, continuous: np.ndarray) -> np.ndarray:
        """The noiseless log-odds of a click: first-order plus factorization-machine terms."""
        first_order = self.id_weights[categorical].sum(axis=1) + continuous @ self.continuous_weights
        factors = self.id_factors[categorical]  # [rows, fields, FACTORS]
        second_order = 0.5 * (np.square(factors.sum(axis=1)) - np.square(factors).sum(axis=1)).sum(axis=1)
        return self.bias + self.signal * (FIRST_ORDER_SCALE * first_order + second_order)

    def sample(self, rng: np.random.Generator, rows: int):
        continuous = np.clip(rng.lognormal(-2.0, 1.2, (rows, CONTINUOUS)), 0.0, 1.0)
        continuous[rng.random((rows, CONTINUOUS)) < 0.2] = 0.0  # missing values
        ranks = np.floor(self.vocab_sizes * rng.random((rows, CATEGORICAL)) ** ZIPF_POWER).astype(np.int64)
        categorical = self.vocab_offsets + np.minimum(ranks, self.vocab_sizes - 1)
        ids = np.concatenate([np.tile(np.arange(1, CONTINUOUS + 1), (rows, 1)), categorical], axis=1)
        values = np.concatenate([continuous, np.ones((rows, CATEGORICAL))], axis=1)

        logit = self.logit(categorical, continuous) + rng.normal(0.0, 0.5, rows)
        labels = (rng.random(rows) < 1.0 / (1.0 + np.exp(-logit))).astype(np.float32)
        return labels, ids, values.astype(np.float32)


@dataclass(frozen=True)
class FileTask:
    path: str
    rows: int
    seed: int
    stream: tuple  # (split index, file index): its own random stream
    feature_size: int
    data_format: str
    signal: float = 1.0
    scores: bool = False  # return the hidden model's scores and the labels (the oracle's AUC)
    header: bool = False  # csv, tsv
    row_group_rows: int = 65536  # parquet


def write_file(task: FileTask) -> tuple[int, float, np.ndarray | None, np.ndarray | None]:
    """Write one file; returns (rows, click rate, the hidden model's noiseless logits and the
    labels where `task.scores`, else None, None)."""
    model = HiddenModel.from_seed(task.seed, task.feature_size, task.signal)
    rng = np.random.default_rng([task.seed, 1, *task.stream])
    clicks, scores, all_labels = 0.0, [], []
    raw = task.data_format in formats.COLUMN_FORMATS
    writer = RawWriter(task) if raw else records.RecordWriter(task.path, task.data_format)
    with writer:
        for start in range(0, task.rows, ROWS_PER_BLOCK):
            labels, ids, values = model.sample(rng, min(ROWS_PER_BLOCK, task.rows - start))
            clicks += labels.sum()
            if task.scores:
                scores.append(model.logit(ids[:, CONTINUOUS:], values[:, :CONTINUOUS]))
                all_labels.append(labels)
            if raw:
                writer.write_block(labels, ids, values)
            else:
                for row in zip(labels, ids, values):
                    writer.write(*row)
    if not task.scores:
        return task.rows, clicks / max(1, task.rows), None, None
    return task.rows, clicks / max(1, task.rows), np.concatenate(scores or [[]]), np.concatenate(all_labels or [[]])


def raw_columns(labels: np.ndarray, ids: np.ndarray, values: np.ndarray) -> dict:
    """A block of rows as raw Criteo columns: label, I1..I13 (counts; None where missing),
    C1..C26 (each id as 8 hex digits, by a bijection of 32-bit numbers)."""
    counts = np.rint(np.expm1(COUNT_SCALE * values[:, :CONTINUOUS])).astype(np.int64)
    hashed = (ids[:, CONTINUOUS:].astype(np.uint64) * np.uint64(2654435761)) & np.uint64(0xFFFFFFFF)
    columns = {"label": labels.astype(np.int64)}
    for i in range(CONTINUOUS):
        columns[f"I{i + 1}"] = [None if v == 0 else int(c) for v, c in zip(values[:, i], counts[:, i])]
    for j in range(CATEGORICAL):
        columns[f"C{j + 1}"] = [f"{int(h):08x}" for h in hashed[:, j]]
    return columns


class RawWriter:
    """Writes blocks of rows to one file as raw columns: CSV, TSV or Parquet (row groups of
    `row_group_rows`)."""

    def __init__(self, task: FileTask):
        self.task, self.pending, self.file, self.parquet = task, [], None, None

    def write_block(self, labels, ids, values) -> None:
        columns = raw_columns(labels, ids, values)
        if self.task.data_format == "parquet":
            import pyarrow as pa

            self.pending.append(pa.table({"label": pa.array(columns["label"], pa.int64()),
                                          **{name: pa.array(v, pa.int64()) for name, v in columns.items()
                                             if name.startswith("I")},
                                          **{name: pa.array(v, pa.string()) for name, v in columns.items()
                                             if name.startswith("C")}}))
            if sum(t.num_rows for t in self.pending) >= self.task.row_group_rows:
                self._flush_row_groups(final=False)
            return
        delimiter = formats.DELIMITERS[self.task.data_format]
        names = list(columns)
        text = (str(v) if v is not None else "" for row in zip(*columns.values()) for v in row)
        fields = list(text)
        lines = [delimiter.join(fields[k:k + len(names)]) for k in range(0, len(fields), len(names))]
        self.file.write("\n".join(lines) + "\n")

    def _flush_row_groups(self, final: bool) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        if not self.pending:
            return
        table = pa.concat_tables(self.pending)
        whole = table.num_rows - (0 if final else table.num_rows % self.task.row_group_rows)
        if self.parquet is None:
            self.parquet = pq.ParquetWriter(self.task.path, table.schema)
        if whole:
            self.parquet.write_table(table.slice(0, whole), row_group_size=self.task.row_group_rows)
        self.pending = [table.slice(whole)] if whole < table.num_rows else []

    def __enter__(self):
        if self.task.data_format != "parquet":
            self.file = open(self.task.path, "w")
            if self.task.header:
                names = ["label"] + [f"I{i + 1}" for i in range(CONTINUOUS)] + [f"C{j + 1}" for j in range(CATEGORICAL)]
                self.file.write(formats.DELIMITERS[self.task.data_format].join(names) + "\n")
        return self

    def __exit__(self, *exc):
        if self.file is not None:
            self.file.close()
        else:
            self._flush_row_groups(final=True)
            if self.parquet is not None:
                self.parquet.close()


def rank_auc(scores: np.ndarray, labels: np.ndarray) -> float | None:
    """ROC AUC of continuous scores (no ties) from their ranks: the probability that a random
    click scores above a random non-click. numpy only: the generator does not load TensorFlow."""
    positives = labels == 1
    clicks, others = int(positives.sum()), int((~positives).sum())
    if not clicks or not others:
        return None
    ranks = np.empty(len(scores))
    ranks[np.argsort(scores, kind="stable")] = np.arange(1, len(scores) + 1)
    return float((ranks[positives].sum() - clicks * (clicks + 1) / 2) / (clicks * others))


def generate(output: str, train_rows: int = 200_000, eval_rows: int = 50_000, files: int = 2,
             data_format: str = "tfrecord", feature_size: int = 117581, seed: int = 7,
             workers: int | None = None, signal: float = 1.0, header: bool = False,
             row_group_rows: int = 65536) -> dict:
    """Write train/ and eval/ under `output`; returns their folders, files, rows, click rate
    and the eval split's oracle AUC (None without eval rows)."""
    suffix = SUFFIXES[data_format]
    tasks = []
    for split_index, (split, rows) in enumerate((("train", train_rows), ("eval", eval_rows))):
        folder = os.path.join(output, split)
        os.makedirs(folder, exist_ok=True)
        for index in range(files):
            share = rows // files + (1 if index < rows % files else 0)
            tasks.append(FileTask(os.path.join(folder, f"part-{index:05d}{suffix}"), share, seed,
                                  (split_index, index), feature_size, data_format, signal, scores=split == "eval",
                                  header=header, row_group_rows=row_group_rows))
    results = pools.run_tasks(write_file, tasks, workers or os.cpu_count(), __name__, data_format == "tfrecord")
    rows = sum(r for r, *_ in results)
    evaluated = [(scores, labels) for _, _, scores, labels in results if scores is not None]
    oracle = rank_auc(np.concatenate([scores for scores, _ in evaluated]),
                      np.concatenate([labels for _, labels in evaluated]))
    return {"files": [t.path for t in tasks], "rows": rows,
            "click_rate": sum(r * c for r, c, *_ in results) / max(1, rows), "oracle_eval_auc": oracle,
            "train": os.path.join(output, "train"), "eval": os.path.join(output, "eval")}


def main(args: argparse.Namespace) -> int:
    result = generate(args.output, args.train_rows, args.eval_rows, args.files, args.format,
                      args.feature_size, args.seed, args.workers, args.signal, args.header, args.row_group_rows)
    oracle = "" if result["oracle_eval_auc"] is None else f"; the hidden model's eval AUC {result['oracle_eval_auc']:.4f}"
    print(f"{result['rows']} rows in {len(result['files'])} files under {args.output} "
          f"(click rate {result['click_rate']:.3f}; "
          + ("raw Criteo columns" if args.format in formats.COLUMN_FORMATS
             else f"feature_size={args.feature_size}, field_size=39") + f"{oracle})")
    return 0

"""Training speed of each optimizer at two embedding table sizes, side by side.

A sparse optimizer's step touches only the rows a batch uses, so its speed should not
depend on feature_size; a dense one (Keras' own Adam) slows down as the table grows.
Input is cached in memory (no input cost), ids spread over the whole table. The configs
are measured in interleaved rounds so that the machine's noise hits them all alike; the
figure is the median round.
"""
from __future__ import annotations

import argparse
import time

from trainer.bench.common import cached_batches, interleaved
from trainer.contract.hyperparameters import SPEC_BY_NAME

OPTIMIZERS = SPEC_BY_NAME["optimizer"].choices
DEFAULT = SPEC_BY_NAME["optimizer"].default


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feature-sizes", default="100000,1000000")
    parser.add_argument("--optimizers", default=",".join(OPTIMIZERS))
    parser.add_argument("--batch-size", type=int, default=SPEC_BY_NAME["batch_size"].default)
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--keras-adam", action="store_true",
                        help="also measure Keras' dense Adam, for comparison")


def run(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    from trainer.models.deepfm import build_deepfm
    from trainer.models.optimizers import make_optimizer

    field_size = SPEC_BY_NAME["field_size"].default
    feature_sizes = [int(float(x)) for x in args.feature_sizes.split(",")]
    optimizers = args.optimizers.split(",") + (["keras_adam"] if args.keras_adam else [])
    configs = {}
    for name in optimizers:
        for feature_size in feature_sizes:
            model = build_deepfm(field_size, feature_size, SPEC_BY_NAME["embedding_size"].default,
                                 SPEC_BY_NAME["deep_layers"].default, SPEC_BY_NAME["dropout"].default,
                                 SPEC_BY_NAME["l2_reg"].default, seed=0)
            optimizer = (tf.keras.optimizers.Adam(0.001) if name == "keras_adam"
                         else make_optimizer(name, 0.001))
            model.compile(optimizer=optimizer, loss="binary_crossentropy")
            data = cached_batches(16, feature_size, args.batch_size)
            model.fit(data, steps_per_epoch=20, epochs=1, verbose=0)  # trace and warm up
            configs[(name, feature_size)] = (model, data)

    def wall_clock_rate(model, data):
        started = time.perf_counter()
        model.fit(data, steps_per_epoch=args.steps, epochs=1, verbose=0)
        return args.steps * args.batch_size / (time.perf_counter() - started)

    medians = interleaved({key: (lambda model=model, data=data: wall_clock_rate(model, data))
                           for key, (model, data) in configs.items()}, args.rounds)
    rows = []
    for name in optimizers:
        rates = {fs: medians[(name, fs)] for fs in feature_sizes}
        rows.append({"optimizer": name, "default": name == DEFAULT,
                     **{f"samples_per_sec@{fs}": round(rate, 1) for fs, rate in rates.items()},
                     "ratio_largest_to_smallest": round(rates[feature_sizes[-1]] / rates[feature_sizes[0]], 3)})
    return {"benchmark": "optimizers", "batch_size": args.batch_size, "steps": args.steps,
            "rounds": args.rounds, "feature_sizes": feature_sizes, "rows": rows}


def table(result: dict) -> str:
    sizes = result["feature_sizes"]
    header = ["optimizer"] + [f"samples/s @ {fs:.0e}" for fs in sizes] + [f"{sizes[-1]:.0e} / {sizes[0]:.0e}"]
    lines = [" | ".join(header), " | ".join("---" for _ in header)]
    for row in result["rows"]:
        name = row["optimizer"] + (" (default)" if row["default"] else "")
        lines.append(" | ".join([name] + [f"{row[f'samples_per_sec@{fs}']:.0f}" for fs in sizes]
                                + [f"{row['ratio_largest_to_smallest']:.2f}"]))
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    sizes = result["feature_sizes"]
    labels = [f"{row['optimizer']} @ {fs:.0e}" for row in result["rows"] for fs in sizes]
    values = [row[f"samples_per_sec@{fs}"] for row in result["rows"] for fs in sizes]
    default = [f"{row['optimizer']} @ {fs:.0e}" for row in result["rows"] if row["default"] for fs in sizes]
    return [Chart("optimizers", "Training speed by optimizer and embedding table size", "samples/s",
                  labels, values, highlight=default)]

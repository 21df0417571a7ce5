"""How close a training step comes to the machine's arithmetic limit.

FLOPs per sample of one training step of the default DeepFM (forward, backward and the
optimizer's update) are counted by TensorFlow's own profiler on the step's graph. Times
the step's measured samples/sec (cached input, no input cost) gives the FLOP/s the step
achieves; the reference is a matmul chain of the MLP's own shapes ([batch, fields x k] ->
256 -> 128 -> 64 -> 1) timed in the same run. The MLP's matmuls (forward and backward)
are most of the step's FLOPs; the rest of the step's time goes to what does few FLOPs:
embedding gathers and sparse row updates, the FM term, and per-step overheads.
"""
from __future__ import annotations

import argparse
import time

from trainer.bench import recorded
from trainer.bench.common import cached_batches, default, default_model, interleaved
from trainer.measure.rates import fit_rate


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=300, help="timed training steps per round")
    parser.add_argument("--matmul-repeats", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    recorded.add_record_argument(parser)


# The figures kept in the repository (trainer.bench.recorded) and compared on every run.
RECORDED_FIGURES = {"samples_per_sec": "training samples/s (cached input)",
                    "fraction_of_matmul": "fraction of the matmul rate achieved"}


def step_flops_per_sample(model, batch_size: int) -> tuple[float, float]:
    """(training step, forward pass) FLOPs per sample, by TensorFlow's profiler."""
    import tensorflow as tf

    loss_fn = tf.keras.losses.BinaryCrossentropy()
    fields = default("field_size")

    @tf.function
    def train_step(ids, values, labels):
        with tf.GradientTape() as tape:
            loss = loss_fn(labels, model({"ids": ids, "values": values}, training=True)) + tf.add_n(model.losses)
        gradients = tape.gradient(loss, model.trainable_variables)
        model.optimizer.apply_gradients(zip(gradients, model.trainable_variables))
        return loss

    @tf.function
    def forward(ids, values):
        return model({"ids": ids, "values": values}, training=False)

    ids, values = tf.TensorSpec([batch_size, fields], tf.int64), tf.TensorSpec([batch_size, fields], tf.float32)
    counts = []
    for graph in (train_step.get_concrete_function(ids, values, tf.TensorSpec([batch_size, 1])).graph,
                  forward.get_concrete_function(ids, values).graph):
        options = tf.compat.v1.profiler.ProfileOptionBuilder.float_operation()
        options["output"] = "none"
        counts.append(tf.compat.v1.profiler.profile(graph, options=options).total_float_ops / batch_size)
    return counts[0], counts[1]


def mlp_shapes(batch_size: int) -> list[tuple[int, int, int]]:
    widths = [default("field_size") * default("embedding_size"), *default("deep_layers"), 1]
    return [(batch_size, n_in, n_out) for n_in, n_out in zip(widths, widths[1:])]


def matmul_chain_rate(shapes, repeats: int) -> float:
    """FLOP/s of the MLP's matmuls (no bias, no activation) run back to back."""
    import tensorflow as tf

    inputs = tf.random.normal(shapes[0][:2])
    weights = [tf.random.normal((n_in, n_out)) for _, n_in, n_out in shapes]

    @tf.function
    def chain(x):
        for _ in tf.range(repeats):
            h = x
            for w in weights:
                h = tf.matmul(h, w)
            x = x + 1e-9 * tf.reduce_sum(h)  # a dependency, so no repeat is skipped
        return x

    chain(inputs).numpy()  # trace
    started = time.perf_counter()
    chain(inputs).numpy()
    seconds = time.perf_counter() - started
    return repeats * sum(2 * b * n_in * n_out for b, n_in, n_out in shapes) / seconds


def run(args: argparse.Namespace) -> dict:
    batch_size = default("batch_size")
    model = default_model()
    train_flops, forward_flops = step_flops_per_sample(model, batch_size)
    shapes = mlp_shapes(batch_size)
    mlp_forward_flops = sum(2 * n_in * n_out for _, n_in, n_out in shapes)  # per sample
    data = cached_batches()
    fit_rate(model, data, 20, batch_size)  # trace
    rates = interleaved({"step": lambda: fit_rate(model, data, args.steps, batch_size),
                         "matmul": lambda: matmul_chain_rate(shapes, args.matmul_repeats)}, args.rounds)
    achieved = train_flops * rates["step"]
    # Time the step's MLP matmuls (forward, and backward at twice that) would take at the
    # reference rate, as a share of the step's time: what is left is not matmul arithmetic.
    matmul_share = 3 * mlp_forward_flops * rates["step"] / rates["matmul"]
    result = {"benchmark": "limit", "batch_size": batch_size, "train_flops_per_sample": round(train_flops),
              "forward_flops_per_sample": round(forward_flops), "mlp_forward_flops_per_sample": mlp_forward_flops,
              "samples_per_sec": round(rates["step"], 1), "achieved_flops_per_sec": achieved,
              "matmul_flops_per_sec": rates["matmul"], "fraction_of_matmul": round(achieved / rates["matmul"], 3),
              "matmul_share_of_step_time": round(matmul_share, 3), "mlp_shapes": shapes,
              "steps": args.steps, "rounds": args.rounds}
    result["against_recorded"] = recorded.compare("limit", result, RECORDED_FIGURES, args.record)
    return result


def table(result: dict) -> str:
    return "\n".join([
        "figure | value", "--- | ---",
        f"training step FLOPs per sample (TF profiler) | {result['train_flops_per_sample']:,}",
        f"forward FLOPs per sample | {result['forward_flops_per_sample']:,}",
        f"MLP matmul FLOPs per sample, forward | {result['mlp_forward_flops_per_sample']:,}",
        f"training samples/s (cached input) | {result['samples_per_sec']:,.0f}",
        f"achieved GFLOP/s | {result['achieved_flops_per_sec'] / 1e9:.1f}",
        f"MLP-shaped matmul GFLOP/s | {result['matmul_flops_per_sec'] / 1e9:.1f}",
        f"fraction of the matmul rate achieved | {result['fraction_of_matmul']:.2f}",
        f"share of the step's time its MLP matmuls need at that rate | {result['matmul_share_of_step_time']:.2f}",
        *recorded.lines(result["against_recorded"]),
    ])


def charts(result: dict):
    from trainer.bench.charts import Chart

    return [Chart("limit", "Training step against the MLP-shaped matmul", "GFLOP/s",
                  ["training step (achieved)", "MLP matmul chain"],
                  [result["achieved_flops_per_sec"] / 1e9, result["matmul_flops_per_sec"] / 1e9],
                  highlight=["training step (achieved)"])]

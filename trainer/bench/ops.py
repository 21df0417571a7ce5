"""Where a training step's time goes, by TensorFlow op type, from TensorFlow's profiler.

The default DeepFM (or the peer comparison's: `--feature-size 1000000`, Adam) trains on
cached batches (no input cost); after a warm-up, `--steps` steps run under TensorFlow's
profiler, the same trace `profile_steps` writes in a job. The trace's op statistics (the
profiler's own `tensorflow_stats` tool, what TensorBoard's Profile tab shows) are summed by
op type: each type's share of the step's op time, and which part of
the model it serves (the MLP's matmuls, the embedding's gathers and row updates, the rest).
"""
from __future__ import annotations

import argparse
import glob
import os
import tempfile

from trainer.bench.common import cached_batches, default, default_model
from trainer.measure.rates import fit_rate

# Op types by what they serve in a DeepFM step (the rest: the FM term, activations, the
# loss, Keras' and the optimizer's bookkeeping).
PARTS = {
    "MLP matmuls": ("MatMul", "_MklMatMul", "_MklNativeMatMul", "_FusedMatMul", "_MklFusedMatMul",
                    "_MklNativeFusedMatMul", "BiasAddGrad"),
    "embedding gather and row updates": (
        "ResourceGather", "GatherV2", "ResourceScatterUpdate", "ResourceScatterSub", "ResourceScatterAdd",
        "UnsortedSegmentSum", "Unique", "UniqueV2", "SparseSegmentSum", "ResourceSparseApplyAdagradV2",
        "ResourceSparseApplyFtrl", "ResourceSparseApplyFtrlV2", "ResourceSparseApplyKerasMomentum"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=200, help="profiled training steps")
    parser.add_argument("--feature-size", type=int, default=default("feature_size"))
    parser.add_argument("--optimizer", default=default("optimizer"))
    parser.add_argument("--top", type=int, default=12, help="op types listed")


def part_of(op_type: str) -> str:
    return next((part for part, types in PARTS.items() if op_type in types), "other")


def op_times(xplane: str) -> dict[str, float]:
    """Self time (microseconds) by op type on the host, from one trace: the profiler's
    `tensorflow_stats` tool (what TensorBoard's Profile tab shows), read with the profile
    plugin's own proto."""
    from tensorboard_plugin_profile.protobuf import tf_stats_pb2
    from tensorflow.python.profiler.internal import _pywrap_profiler

    data, ok = _pywrap_profiler.xspace_to_tools_data([xplane], "tensorflow_stats", {})
    if not ok:
        raise RuntimeError(f"the profiler could not read {xplane}")
    stats = tf_stats_pb2.TfStatsDatabase.FromString(data)
    times: dict[str, float] = {}
    for record in stats.without_idle.tf_stats_record:
        if record.host_or_device.lower() == "host":
            times[record.op_type] = times.get(record.op_type, 0.0) + record.total_self_time_in_us
    return times


def run(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    batch_size = default("batch_size")
    model = default_model(args.feature_size, args.optimizer)
    data = cached_batches(feature_size=args.feature_size)
    fit_rate(model, data, 100, batch_size)  # trace and warm up
    with tempfile.TemporaryDirectory(prefix="trainer-ops-") as folder:
        started_at = int(model.optimizer.iterations.numpy())
        tf.profiler.experimental.start(folder)
        samples_per_sec = fit_rate(model, data, args.steps, batch_size)
        tf.profiler.experimental.stop()
        # Every step the trace holds: fit_rate runs one untimed call more than it times.
        profiled_steps = int(model.optimizer.iterations.numpy()) - started_at
        traces = glob.glob(os.path.join(folder, "**", "*.xplane.pb"), recursive=True)
        times = op_times(traces[0])
    total = sum(times.values())
    by_type = sorted(((op, seconds / total) for op, seconds in times.items()), key=lambda item: -item[1])
    parts: dict[str, float] = {}
    for op, share in by_type:
        parts[part_of(op)] = parts.get(part_of(op), 0.0) + share
    return {"benchmark": "ops", "batch_size": batch_size, "feature_size": args.feature_size,
            "optimizer": args.optimizer, "steps": args.steps, "samples_per_sec": round(samples_per_sec, 1),
            "profiled_steps": profiled_steps, "op_time_per_step_us": round(total / profiled_steps, 1), "top": args.top,
            "by_type": [{"op": op, "share": round(share, 4), "part": part_of(op)} for op, share in by_type],
            "by_part": {part: round(share, 4) for part, share in sorted(parts.items(), key=lambda item: -item[1])}}


def table(result: dict) -> str:
    lines = ["op type | part | share of op time", "--- | --- | ---"]
    lines += [f"{row['op']} | {row['part']} | {row['share']:.1%}" for row in result["by_type"][:result["top"]]]
    lines += ["", "part | share of op time", "--- | ---"]
    lines += [f"{part} | {share:.1%}" for part, share in result["by_part"].items()]
    lines += ["", f"op time per step: {result['op_time_per_step_us']:,.0f} us; "
                  f"{result['samples_per_sec']:,.0f} samples/s while profiled (batch {result['batch_size']}, "
                  f"{result['feature_size']:,} ids, {result['optimizer']})"]
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    top = result["by_type"][:result["top"]]
    return [Chart("ops", f"Where a training step's op time goes (batch {result['batch_size']}, "
                         f"{result['feature_size']:,} ids, {result['optimizer']})", "share of op time (%)",
                  [row["op"] for row in top], [100 * row["share"] for row in top],
                  highlight=[row["op"] for row in top if row["part"] == "MLP matmuls"])]

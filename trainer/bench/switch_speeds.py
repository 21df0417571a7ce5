"""What the speed switches do on this CPU: mixed precision (bfloat16, float16 with loss
scaling; P20) and XLA (`jit_compile`; P21), against the float32 default.

The default DeepFM trains on cached input (no input cost: the switches act on compute
only), each configuration in its own model, in interleaved rounds (median round). The
loss after the timed steps shows that a switch still trains.
"""
from __future__ import annotations

import argparse
import math

from trainer.bench.common import cached_batches, default, default_model, interleaved
from trainer.measure.rates import fit_rate
from trainer.cpu.settings import bfloat16_supported

CASES = {
    "float32": ("none", False),
    "mixed_bfloat16": ("mixed_bfloat16", False),
    "mixed_float16": ("mixed_float16", False),
    "jit_compile": ("none", True),
    "jit_compile+bfloat16": ("mixed_bfloat16", True),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--steps", type=int, default=300, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))


def run(args: argparse.Namespace) -> dict:
    import tensorflow as tf

    batch_size = default("batch_size")
    data = cached_batches()
    models, errors = {}, {}
    for name in args.cases.split(","):
        precision, jit = CASES[name]
        if precision == "mixed_bfloat16" and not bfloat16_supported():  # oneDNN would abort the process
            errors[name] = "this CPU has no AVX-512, which oneDNN's bfloat16 kernels need"
            continue
        tf.keras.mixed_precision.set_global_policy("float32" if precision == "none" else precision)
        try:
            models[name] = default_model(jit_compile=jit)
            fit_rate(models[name], data, 20, batch_size)  # trace (and compile) the step
        except Exception as err:  # a switch this TensorFlow cannot run here: reported, not fatal
            errors[name] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
            models.pop(name, None)
        finally:
            tf.keras.mixed_precision.set_global_policy("float32")
    rates = interleaved({name: (lambda name=name: fit_rate(models[name], data, args.steps, batch_size))
                         for name in models}, args.rounds)
    base = rates.get("float32")
    rows = []
    for name in args.cases.split(","):
        if name in errors:
            rows.append({"case": name, "error": errors[name]})
            continue
        loss = float(models[name].evaluate(data, steps=20, verbose=0))
        rows.append({"case": name, "samples_per_sec": round(rates[name], 1),
                     "vs_float32": round(rates[name] / base, 3) if base else None,
                     "loss": round(loss, 5) if math.isfinite(loss) else None})
    return {"benchmark": "switches", "rows": rows, "steps": args.steps, "rounds": args.rounds,
            "batch_size": batch_size}


def table(result: dict) -> str:
    lines = ["switch | samples/s | vs float32 | loss after the rounds", "--- | --- | --- | ---"]
    for row in result["rows"]:
        if "error" in row:
            lines.append(f"{row['case']} | failed: {row['error']} | |")
            continue
        ratio = f"{row['vs_float32']:.2f}" if row["vs_float32"] is not None else ""
        loss = f"{row['loss']:.4f}" if row["loss"] is not None else "not finite"
        lines.append(f"{row['case']} | {row['samples_per_sec']:,.0f} | {ratio} | {loss}")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    rows = [row for row in result["rows"] if "samples_per_sec" in row]
    return [Chart("switches", "Mixed precision and XLA on this CPU (cached input)", "samples/s",
                  [row["case"] for row in rows], [row["samples_per_sec"] for row in rows], highlight=["float32"])]

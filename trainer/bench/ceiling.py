"""Is training input-bound? The default DeepFM trained on the real pipeline against the
same model trained on one cached batch repeated (`take(1).cache().repeat()`: no input
cost at all, the ceiling; P24).

Cases, side by side in interleaved rounds (median round): the ceiling; the same with 64
distinct batches cached (`take(64)`: still no input cost, but the step's embedding rows
vary as in real training instead of staying hot in the CPU's caches, which tells how much
of the gap to the ceiling is the input's); TFRecord in File mode read from disk each epoch
(cache off); TFRecord from the in-memory cache (what
`cache_input=auto` gives a dataset that fits: later epochs); libsvm text from disk.
A ratio near 1 means the input keeps up with the step; far below, the job is input-bound.
"""
from __future__ import annotations

import argparse
import tempfile

from trainer.bench.common import default, default_model, generated_spec, interleaved, job_input
from trainer.measure.rates import fit_rate

CASES = ("ceiling", "ceiling-64", "tfrecord", "tfrecord-cached", "libsvm")
DISTINCT_BATCHES = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rows", type=int, default=200_000)
    parser.add_argument("--steps", type=int, default=1500, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cases", default=",".join(CASES))


def run(args: argparse.Namespace) -> dict:
    batch_size = default("batch_size")
    cases = args.cases.split(",")
    with tempfile.TemporaryDirectory(prefix="trainer-bench-ceiling-") as folder:
        tfrecord = generated_spec(folder, args.rows, "tfrecord")
        from_disk = job_input(tfrecord).dataset(0)
        datasets = {
            "ceiling": from_disk.take(1).cache().repeat(),
            "ceiling-64": from_disk.take(DISTINCT_BATCHES).cache().repeat(),
            "tfrecord": from_disk.repeat(),
            "tfrecord-cached": job_input(tfrecord, cache=True).dataset(0).repeat(),
            "libsvm": job_input(generated_spec(folder, args.rows, "libsvm")).dataset(0).repeat(),
        }
        models = {}
        for name in cases:
            models[name] = default_model()
            # Traces the step and, for the cached case, fills the cache with a whole pass.
            warm_steps = {"tfrecord-cached": -(-args.rows // batch_size), "ceiling-64": DISTINCT_BATCHES}.get(name, 20)
            fit_rate(models[name], datasets[name], warm_steps, batch_size)
        rates = interleaved({name: (lambda name=name: fit_rate(models[name], datasets[name], args.steps,
                                                                batch_size)) for name in cases}, args.rounds)
    ceiling = rates.get("ceiling")
    rows = [{"case": name, "samples_per_sec": round(rate, 1),
             "of_ceiling": round(rate / ceiling, 3) if ceiling else None} for name, rate in rates.items()]
    return {"benchmark": "ceiling", "rows": rows, "records": args.rows, "steps": args.steps,
            "rounds": args.rounds, "batch_size": batch_size}


DESCRIPTIONS = {
    "ceiling": "one cached batch repeated: no input cost",
    "ceiling-64": f"{DISTINCT_BATCHES} distinct cached batches repeated: no input cost, rows not all hot in cache",
    "tfrecord": "TFRecord, File mode, read from disk every epoch",
    "tfrecord-cached": "TFRecord, File mode, from the in-memory cache",
    "libsvm": "libsvm text, File mode, read from disk every epoch",
}


def table(result: dict) -> str:
    lines = ["case | input | samples/s | of the ceiling", "--- | --- | --- | ---"]
    for row in result["rows"]:
        share = f"{row['of_ceiling']:.2f}" if row["of_ceiling"] is not None else ""
        lines.append(f"{row['case']} | {DESCRIPTIONS[row['case']]} | {row['samples_per_sec']:,.0f} | {share}")
    return "\n".join(lines)


def charts(result: dict):
    from trainer.bench.charts import Chart

    return [Chart("ceiling", "Training on the real input against the cached ceiling", "samples/s",
                  [row["case"] for row in result["rows"]], [row["samples_per_sec"] for row in result["rows"]],
                  highlight=["ceiling", "ceiling-64"])]

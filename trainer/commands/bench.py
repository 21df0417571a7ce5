"""`trainer bench NAME`: shipped benchmarks. Each prints a table and writes JSON, a
Markdown report and PNG charts into its output folder.

    trainer bench input --out out/bench

Figures are measured side by side in one run (this kind of machine is shared and noisy:
compare ratios within a run, not absolute numbers across runs).
"""
from __future__ import annotations

import argparse
import importlib
import os

BENCHMARKS = {
    "optimizers": "trainer.bench.optimizer_speeds",
    "modes": "trainer.bench.mode_speeds",
    "scale": "trainer.bench.scale",
    "input": "trainer.bench.input",
    "ceiling": "trainer.bench.ceiling",
    "switches": "trainer.bench.switch_speeds",
    "peer": "trainer.bench.peer",
    "limit": "trainer.bench.limit",
    "ops": "trainer.bench.ops",
    "scripts": "trainer.bench.script_speeds",
    "build": "trainer.bench.build",
    "hetero": "trainer.bench.hetero",
    "settings": "trainer.bench.cpu_settings",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    subparsers = parser.add_subparsers(dest="benchmark", required=True, metavar="BENCHMARK")
    for name, module_name in BENCHMARKS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=module.__doc__.splitlines()[0], description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        sub.add_argument("--out", default=os.path.join("out", "bench"),
                         help="folder for the JSON result, the Markdown report and the charts")
        module.add_arguments(sub)


def main(args: argparse.Namespace) -> int:
    from trainer.bench import charts
    from trainer.bench.common import apply_job_cpu_settings
    from trainer.logs import setup_logging

    setup_logging()
    apply_job_cpu_settings()
    module = importlib.import_module(BENCHMARKS[args.benchmark])
    result = module.run(args)
    table = module.table(result)
    paths = charts.write(args.out, args.benchmark, module.__doc__, result, table, module.charts(result))
    print(table)
    print("\nwritten: " + ", ".join(paths))
    return 0

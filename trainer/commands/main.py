"""`trainer`: the command line around the `train` entry (local jobs, data tools, demo, bench, tune)."""
from __future__ import annotations

import argparse
import importlib
import sys

# subcommand -> (module with add_arguments(parser) and main(args), help)
COMMANDS = {
    "local": ("trainer.commands.local", "run a training job here, in a folder laid out like /opt/ml"),
    "plan": ("trainer.commands.plan", "print how the job will use its hosts and devices (and check its input)"),
    "convert": ("trainer.data.convert", "convert libsvm or raw Criteo files to TFRecord"),
    "datagen": ("trainer.data.datagen", "generate a seeded synthetic Criteo-like dataset"),
    "split": ("trainer.data.split", "split record files into parts by record counts"),
    "demo": ("trainer.commands.demo", "train DeepFM on a generated dataset through trainer local"),
    "bench": ("trainer.commands.bench", "run a shipped benchmark"),
    "tune": ("trainer.commands.tune", "measure CPU thread settings on a job's model and data, and print the best"),
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["train"]:  # the container entry, also reachable as `trainer train`
        from trainer.commands.train import train_main

        return train_main()
    parser = argparse.ArgumentParser(prog="trainer", description=__doc__)
    subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subparsers.add_parser("train", help="run the job in $SAGEMAKER_BASE_DIR (or /opt/ml), as SageMaker does")
    for name, (module_name, help_text) in COMMANDS.items():
        module = importlib.import_module(module_name)
        sub = subparsers.add_parser(name, help=help_text, description=module.__doc__,
                                    formatter_class=argparse.RawDescriptionHelpFormatter)
        module.add_arguments(sub)
        sub.set_defaults(run=module.main)
    args = parser.parse_args(argv)
    if args.command in ("tune", "bench"):  # they build the container's own model in this process
        from trainer.tf_line import installed

        installed().use_own_keras()
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())

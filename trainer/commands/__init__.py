"""The command line: `trainer` (trainer.commands.main) and its verbs, and the `train` entry.

Nothing in the package imports these modules: they are front doors only.
"""

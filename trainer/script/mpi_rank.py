"""A rank of a user's script under mpirun: the script run as `python -m mpi4py` runs it, as
AWS's container does (an uncaught exception aborts every rank instead of hanging them), and
one line when the script ends by itself.

That line is how the launcher tells a rank that ended early (EarlyStopping on rank 0 only,
a shorter data shard) from the rank that failed because of it: the others then fail in
their next collective with an error that names no one (trainer.script.launch).
"""
from __future__ import annotations

import os
import re
import sys

ENDED = "trainer: rank {rank}'s script ended by itself (exit code 0)"
ENDED_LINE = re.compile(re.escape(ENDED).replace(re.escape("{rank}"), r"(\d+)"))


def main() -> None:
    from mpi4py.run import main as run_as_mpi4py_does

    try:
        run_as_mpi4py_does()  # reads sys.argv as `python -m mpi4py` does
    except SystemExit as end:
        if end.code in (None, 0):
            say_ended()
        raise
    say_ended()


def say_ended() -> None:
    sys.stdout.flush()
    print(ENDED.format(rank=os.environ.get("TRAINER_RANK", "?")), file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()

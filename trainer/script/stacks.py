"""Every Python process of a script's ranks on this host, and the line each is on.

py-spy reads another process's Python stack from outside (as a debugger does), so it
works on a script that was not written for it, on a process blocked inside TensorFlow's
or Horovod's native code, and without a signal handler the script could replace; the
standard library's faulthandler needs code inside the process. It briefly pauses each
process it reads. Where it cannot (no ptrace rights), the stack says why instead.
"""
from __future__ import annotations

import logging
import os
import re
import shutil
import subprocess
import sys

from trainer.errors import Stopped
from trainer.supervision.supervise import processes_table
from trainer.report import EXIT_JOB_ERROR, EXIT_STOPPED, AlreadyReported, write_failure

log = logging.getLogger("trainer")

PY_SPY_TIMEOUT_SEC = 20.0
LINES_PER_PROCESS = 30  # each thread's innermost frames come first in py-spy's dump
MAX_PROCESSES = 16  # a host's ranks; a data loader's many workers are cut here
INNERMOST = re.compile(r"\((.+):\d+\)\s*$")  # "    main (train.py:30)"


def python_descendants(roots: list[int]) -> list[int]:
    """The Python processes among `roots` and every process under them, parents first."""
    table = processes_table()
    found, queue = [], list(roots)
    while queue:
        pid = queue.pop(0)
        if pid in table and is_python(pid):
            found.append(pid)
        queue += sorted(child for child, (parent, _) in table.items() if parent == pid)
    return found


def is_python(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")).startswith("python")
    except OSError:
        return False


def rank_name(pid: int) -> str:
    """"rank 3 (pid 123)": the rank its launcher or this container gave the process."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = dict(entry.split(b"=", 1) for entry in f.read().split(b"\0") if b"=" in entry)
    except OSError:
        environ = {}
    for name in (b"OMPI_COMM_WORLD_RANK", b"TRAINER_RANK"):
        if environ.get(name, b"-1") != b"-1":
            return f"rank {environ[name].decode()} (pid {pid})"
    return f"pid {pid}"


def stack_of(pid: int) -> str:
    """py-spy's dump of one process: each thread's frames, innermost first."""
    # This Python's own (a virtual environment's bin is not always on PATH), else PATH's.
    py_spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    py_spy = py_spy if os.path.exists(py_spy) else shutil.which("py-spy") or "py-spy"
    try:
        done = subprocess.run([py_spy, "dump", "--pid", str(pid)], capture_output=True, text=True,
                              timeout=PY_SPY_TIMEOUT_SEC)
    except FileNotFoundError:
        return "(py-spy is not installed: no stack)"
    except subprocess.TimeoutExpired:
        return f"(py-spy did not read it within {PY_SPY_TIMEOUT_SEC:.0f} s)"
    if done.returncode != 0:
        error = (done.stderr.strip().splitlines() or ["?"])[0]
        return f"(py-spy could not read it: {error})"
    # Its first lines name the process and its Python, which the heading already says.
    lines = [line for line in done.stdout.splitlines() if line.strip() and not line.startswith(("Process ", "Python v"))]
    if len(lines) > LINES_PER_PROCESS:
        lines = lines[:LINES_PER_PROCESS] + [f"    ... {len(lines) - LINES_PER_PROCESS} more lines"]
    return "\n".join(lines)


def innermost_file(stack: str) -> str | None:
    """The file of the main thread's innermost frame in py-spy's dump."""
    lines = stack.splitlines()
    for index, line in enumerate(lines[:-1]):
        if line.startswith("Thread ") and line.endswith('"MainThread"'):
            frame = INNERMOST.search(lines[index + 1])
            return frame.group(1) if frame else None
    return None


def waits_in_library(pid: int | None, code_dir: str) -> bool:
    """Whether the process's main thread is inside code other than the script's own
    (TensorFlow's, Horovod's: a collective or a remote call waiting for another process)."""
    if pid is None:
        return False
    path = innermost_file(stack_of(pid))
    if path is None:
        return False
    # py-spy shows a file by its path under the folder Python found it in (sys.path).
    own = os.path.join(code_dir, path) if not os.path.isabs(path) else path
    return not (os.path.realpath(own).startswith(os.path.realpath(code_dir) + os.sep) and os.path.exists(own))


def stacks(host: str, roots: list[int]) -> str:
    """Every Python process under `roots` on this host: a heading each, then its stack."""
    pids = python_descendants(roots)
    if not pids:
        return f"no Python process of the script is running on {host}"
    parts = [f"{rank_name(pid)} on {host}:\n{stack_of(pid)}" for pid in pids[:MAX_PROCESSES]]
    if len(pids) > MAX_PROCESSES:
        parts.append(f"... {len(pids) - MAX_PROCESSES} more Python processes")
    return "\n\n".join(parts)


def failed_with_stacks(job, err: Exception, roots: list[int]) -> AlreadyReported:
    """This host's part ends with `err` (another host failed, stalled or stopped): its reason,
    then the stacks of the script's processes under `roots`, go to the failure file and the log."""
    where = f"the stacks of the processes on {job.current_host} then:\n" + stacks(job.current_host, roots)
    write_failure(job.output_dir, str(err), where)
    log.error("%s\n%s", err, where)
    return AlreadyReported(EXIT_STOPPED if isinstance(err, Stopped) else EXIT_JOB_ERROR)

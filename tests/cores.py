"""The machine's cores, shared by the test processes (pytest-xdist) so that no test's jobs
race another test's for them.

A test says how many of the machine's two cores its jobs keep busy with `cores(n)`:

- 2 (the default of a `slow` test): a multi-process job (MPI ranks, parameter servers,
  several hosts, containers) or anything else that keeps both cores busy. It runs alone
  among the tests that need cores: two such jobs side by side starve each other (MPI ranks
  spinning in their collectives while the rank they wait for has no core), and a bound the
  test asserts would measure the other test's load.
- 1: one training process (its step's threads and its input pipeline keep about one core
  busy); two of them may run side by side.
- 0 (the default of a fast test): no job, or a job that mostly waits (a bounded wait for
  a host that never comes).

A test holds its cores from the start of its setup (module and session fixtures that run
jobs included) to the end of its teardown. The cores are two lock files of the test run,
taken with flock(2). A 1-core test takes a free core beside a 1-core test that holds the
other, even while a 2-core test waits, so that both cores stay busy; when both are free, a
waiting 2-core test takes them first. A 2-core test holds neither core while it waits.
(A 2-core test that held one core while it waited for the other left that core idle until
the test on the other ended, with every 1-core test queued behind it: one of the two cores
sat idle for 28 of the 84 minutes of a whole run. 1-core tests that always went first kept
four test processes' 2-core tests waiting behind one process's run of 1-core tests, one
core idle.)
"""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import resource
import shutil
import tempfile
import time

import pytest

MACHINE_CORES = 2
POLL_SEC = 0.2


def cores_of(item) -> int:
    marker = item.get_closest_marker("cores")
    if marker is not None:
        return int(marker.args[0])
    return MACHINE_CORES if item.get_closest_marker("slow") else 0


@contextlib.contextmanager
def holding(cores: int, lock_dir: str):
    """The machine's `cores` (0, 1 or 2) for the duration of the block."""
    files = [open(os.path.join(lock_dir, f"core-{index}"), "a") for index in range(MACHINE_CORES)]
    waiting_for_both = os.path.join(lock_dir, "waiting-for-both")
    try:
        if cores >= MACHINE_CORES:
            with open(waiting_for_both, "a") as waiting:
                fcntl.flock(waiting, fcntl.LOCK_SH)  # shared by every test waiting for both cores
                while not _try_lock_all(files):
                    time.sleep(POLL_SEC)
        elif cores:
            while not _take_one(files, waiting_for_both):
                time.sleep(POLL_SEC)
        yield
    finally:
        for file in files:
            file.close()  # releases its lock


def _take_one(files, waiting_for_both: str) -> bool:
    """A free core, beside a test that holds the other; when both are free, only if no test
    waits for both (it goes first, or a run of 1-core tests would keep it waiting forever
    with one core idle)."""
    for file in files:
        if _try_lock(file):
            others = [other for other in files if other is not file]
            if _try_lock_all(others):  # both were free
                for other in others:
                    fcntl.flock(other, fcntl.LOCK_UN)
                if not _nobody_holds(waiting_for_both):
                    fcntl.flock(file, fcntl.LOCK_UN)
                    return False
            return True
    return False


def _nobody_holds(path: str) -> bool:
    with open(path, "a") as file:
        return _try_lock(file)  # and released as it closes


def _try_lock_all(files) -> bool:
    """All of them, or none: a core taken while the other is busy is given back at once."""
    taken = []
    for file in files:
        if not _try_lock(file):
            for other in taken:
                fcntl.flock(other, fcntl.LOCK_UN)
            return False
        taken.append(file)
    return True


def _try_lock(file) -> bool:
    try:
        fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        return False


# The run's lock folder, made by the first test process and inherited by the others; or given
# by whoever runs two test runs at once on one machine (build.sh test: both TensorFlow lines'),
# which then share the cores as one run's processes do.
LOCKS_ENV = "TRAINER_TEST_CORES"
_made_here = False


def pytest_configure(config):
    global _made_here
    if not hasattr(config, "workerinput") and not os.environ.get(LOCKS_ENV):  # the run's first process
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="trainer-test-cores-")
        _made_here = True


def pytest_unconfigure(config):
    if _made_here:
        shutil.rmtree(os.environ.pop(LOCKS_ENV, ""), ignore_errors=True)


# Where each test's wall time and the machine's CPU time during it are written (JSON lines),
# when set: how the suite's time is measured (docs/development.md). Run with -n 0, the CPU
# time is the test's own.
CPU_LOG_ENV = "TRAINER_TEST_CPU_LOG"


def machine_cpu_sec() -> float:
    """CPU time the whole machine has spent (user, nice, system) since boot."""
    with open("/proc/stat") as f:
        user, nice, system = (int(value) for value in f.readline().split()[1:4])
    return (user + nice + system) / os.sysconf("SC_CLK_TCK")


def own_cpu_sec() -> float:
    """CPU time of this test process and of the children it has waited for (the jobs a test
    runs through subprocess, and theirs): a test's own share of the machine, which the
    machine's total (other tests' included) only bounds. Containers' processes are the
    engine's children, not the test's: a container test's own share is a lower bound."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


# The builds a test's fixtures wait for: a fixture's name -> the lock file its build holds
# while it runs (set by conftest: build.sh's image locks, held by the run's background build).
# A test waits for them before it takes its cores, so that no core is held idle for an image
# that is still building (a container test held one for 4 minutes so).
BUILD_LOCKS: dict[str, str] = {}


def builds_to_wait_for(fixturenames, build_locks: dict[str, str]) -> list[str]:
    return [build_locks[name] for name in fixturenames if name in build_locks]


def wait_for_builds(lock_paths) -> None:
    """Until no build holds these locks (one that has not started is not waited for)."""
    for path in lock_paths:
        if os.path.exists(path):
            with open(path, "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)  # released as it closes


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    cores = cores_of(item)
    asked = time.monotonic()
    wait_for_builds(builds_to_wait_for(getattr(item, "fixturenames", ()), BUILD_LOCKS))
    with holding(cores, os.environ[LOCKS_ENV]):
        began, began_at, cpu, own = time.monotonic(), time.time(), machine_cpu_sec(), own_cpu_sec()
        yield
        if os.environ.get(CPU_LOG_ENV):
            with open(os.environ[CPU_LOG_ENV], "a") as log:
                log.write(json.dumps({"test": item.nodeid, "cores": cores, "started": round(began_at, 1),
                                      "waited_sec": round(began - asked, 1),
                                      "wall_sec": round(time.monotonic() - began, 1),
                                      "machine_cpu_sec": round(machine_cpu_sec() - cpu, 1),
                                      "own_cpu_sec": round(own_cpu_sec() - own, 1)}) + "\n")


def tier_of(test_id: str) -> str:
    """tests/<tier>/test_x.py::test_y -> <tier> (unit, integration, faults, container)."""
    parts = test_id.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 else "other"


def summary(log_lines, slowest: int = 30) -> str:
    """The CPU log's tests per tier (count, summed wall, waiting for cores, machine and own
    CPU seconds), the core-seconds the tests held (over the machine's cores: the least time
    the run can take), then its slowest tests with the cores they held and the cores their
    own processes kept busy (own CPU over wall): how the suite's time is measured, and
    which `cores(n)` to check."""
    rows = [json.loads(line) for line in log_lines if line.strip()]
    tiers: dict[str, list[float]] = {}
    for row in rows:
        tier = tiers.setdefault(tier_of(row["test"]), [0, 0.0, 0.0, 0.0, 0.0])
        tier[0] += 1
        tier[1] += row["wall_sec"]
        tier[2] += row["waited_sec"]
        tier[3] += row["machine_cpu_sec"]
        tier[4] += row.get("own_cpu_sec", 0.0)
    lines = [f"{'tier':12} {'tests':>5} {'wall s':>7} {'waited s':>8} {'machine CPU s':>13} {'own CPU s':>9}"]
    lines += [f"{tier:12} {count:5d} {wall:7.0f} {waited:8.0f} {cpu:13.0f} {own:9.0f}"
              for tier, (count, wall, waited, cpu, own) in sorted(tiers.items(), key=lambda item: -item[1][1])]
    held = sum(row["wall_sec"] * row["cores"] for row in rows)
    lines.append(f"cores held: {held:.0f} core-s, at least {held / MACHINE_CORES / 60:.1f} min on {MACHINE_CORES} cores")
    lines.append(f"slowest {slowest} (wall s, cores held, own cores busy, test):")
    lines += [f"{row['wall_sec']:7.1f} {row['cores']} {own_cores(row):4.1f} {row['test']}"
              for row in sorted(rows, key=lambda row: -row["wall_sec"])[:slowest]]
    return "\n".join(lines)


def own_cores(row: dict) -> float:
    return row.get("own_cpu_sec", 0.0) / row["wall_sec"] if row["wall_sec"] else 0.0


if __name__ == "__main__":  # python tests/cores.py LOG: the summary of a run's CPU log
    import sys

    with open(sys.argv[1]) as log_file:
        print(summary(log_file))

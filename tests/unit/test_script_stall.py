"""When a script's ranks have stalled (trainer.script.stall): the decisions, fed with times."""
import os
import subprocess
import sys
import time

import pytest

from trainer.plan.mpi import horovod_stall_check_sec
from trainer.script import stacks, stall

BOUND = 100.0


def names(rank):
    return f"rank {rank} on algo-{rank // 2 + 1}"


def cpu_run(*samples):
    """(time, {rank: CPU seconds}) samples."""
    progress = stall.Progress(BOUND, names)
    for at, used in samples:
        progress.cpu_sample(at, used)
    return progress


IDLE, BUSY = {"r": 0.2}, {"r": 50.0}
CPU_CASES = {
    "idle for the whole bound": ([(0, {"r": 0.0}), (50, IDLE), (100, IDLE)], 100, "r"),
    "idle, not yet the bound": ([(0, {"r": 0.0}), (50, IDLE), (99, IDLE)], 99, None),
    "busy: a long evaluation": ([(0, {"r": 0.0}), (50, {"r": 30.0}), (100, BUSY)], 100, None),
    "a pause shorter than the bound, then work": (
        [(0, {"r": 0.0}), (60, {"r": 0.1}), (120, {"r": 40.0}), (160, {"r": 40.2})], 160, None),
    "work, then idle for the bound": (
        [(0, {"r": 0.0}), (50, {"r": 40.0}), (100, {"r": 40.1}), (150, {"r": 40.3})], 150, "r"),
    "just under the idle share (1% of a core)": ([(0, {"r": 0.0}), (100, {"r": 0.99})], 100, "r"),
    "at the idle share": ([(0, {"r": 0.0}), (100, {"r": 1.0})], 100, None),
}


@pytest.mark.parametrize("case", CPU_CASES)
def test_a_rank_is_stalled_when_it_used_almost_no_cpu_for_the_bound(case):
    samples, now, stalled = CPU_CASES[case]
    found = cpu_run(*samples).stall(now)
    assert (found.who if found else None) == stalled
    if found:
        assert found.seconds >= BOUND and "of CPU in that time" in found.how


def test_a_rank_that_ended_is_forgotten():
    progress = cpu_run((0, {"r": 0.0, "s": 0.0}), (50, {"s": 30.0}), (100, {"s": 60.0}))
    assert progress.stall(100) is None


LOST = "rank 1 on algo-2 cannot be reached (gRPC: Socket closed)"
ENDED_HOST_CASES = {
    # (TensorFlow's word at each time, while the process it names has ended, or None), the time of the check, whether it is a stall
    "cannot reach an ended host for the bound": ([(10, LOST), (60, LOST), (110, LOST)], 110, True),
    "not yet the bound": ([(10, LOST), (109, LOST)], 109, False),
    "the word stops (TensorFlow got through), then again": ([(0, LOST), (50, None), (60, LOST), (150, LOST)], 150, False),
    "never said": ([(0, None), (200, None)], 200, False),
}


@pytest.mark.parametrize("case", ENDED_HOST_CASES)
def test_busy_retries_of_a_process_that_has_ended_are_a_stall(case):
    words, now, stalled = ENDED_HOST_CASES[case]
    progress = stall.Progress(BOUND, names)
    firsts = [at for at, word in words if progress.waits_for_ended_process(at, word)]
    progress.cpu_sample(now, {"rank 0 on algo-1": 500.0})  # busy: the retries use CPU
    found = progress.stall(now)
    assert bool(found) == stalled
    assert firsts == [at for i, (at, word) in enumerate(words) if word and (i == 0 or not words[i - 1][1])]
    if found:
        assert found.who == "rank 0 on algo-1" and found.seconds >= BOUND and f"last word: {LOST}" in found.how


def reports(*times, check=10.0, missing=frozenset({3})):
    progress = stall.Progress(BOUND, names)
    for at in times:
        progress.horovod_report(at, missing, check)
    return progress


HOROVOD_CASES = {
    # Reports every check period (10 s) from t=10: stalled since t=0.
    "reported for the bound": (reports(*range(10, 101, 10)), 100, "rank 3 on algo-2"),
    "not yet the bound": (reports(*range(10, 91, 10)), 95, None),
    "reports stopped (the ranks met again)": (reports(*range(10, 61, 10)), 100, None),
    "a gap: a new stall since the second run": (reports(10, 20, 30, *range(80, 141, 10)), 140, None),
    "several ranks missing": (reports(*range(10, 101, 10), missing=frozenset({1, 3})), 100,
                              "rank 1 on algo-1, rank 3 on algo-2"),
}


@pytest.mark.parametrize("case", HOROVOD_CASES)
def test_horovods_reports_name_the_missing_ranks_once_they_last_the_bound(case):
    progress, now, who = HOROVOD_CASES[case]
    found = progress.stall(now)
    assert (found.who if found else None) == who
    if found:
        assert "Missing ranks" in found.how and found.seconds >= BOUND


class FakeJob:
    """Only what StallWatch reads of a job."""
    current_host = "algo-1"
    output_dir = "/nonexistent"

    class entry_point:
        program = "train.py"
        code_dir = "/opt/ml/code"

    class hyperparameters:
        stall_timeout_sec = BOUND


class FakePlan:
    processes = [object()] * 4

    @staticmethod
    def on_host(host):
        return []

    @staticmethod
    def process(rank):
        class Named:
            name = names(rank)
        return Named


def test_horovods_report_is_read_from_mpiruns_tagged_output():
    """As Horovod 0.28's rank 0 writes it under mpirun --tag-output (a tag may open
    pieces of one line, and the report spans lines)."""
    watch = stall.StallWatch(FakeJob, FakePlan)
    for line in [
        "[1,0]<stderr>:[[1,0]<stderr>:2026-11-26 02:00:16[1,0]<stderr>:.[1,0]<stderr>: W [1,0]<stderr>:stall_inspector.cc:107] "
        "[1,0]<stderr>:One or more tensors were submitted to be reduced, gathered or broadcasted by subset of ranks "
        "and are waiting for remainder of ranks for more than 5 seconds. This may indicate that ...\n",
        "[1,0]<stderr>:Missing ranks:\n",
        "[1,0]<stderr>:1: [HorovodAllreduce][1,0]<stderr>:\n",
        "[1,0]<stderr>:3: [HorovodAllreduce_grad_0, HorovodAllreduce_grad_1]\n",
        "[1,2]<stdout>:epoch 1\n",
    ]:
        watch.feed(line)
    ((at, missing, check),) = watch.progress._reports
    assert missing == {1, 3} and check == 5.0 and abs(at - time.monotonic()) < 5


CHECK_CASES = {900: 60, 240: 60, 100: 25, 20: 5, 3: 1}


@pytest.mark.parametrize("bound", CHECK_CASES)
def test_horovods_check_period_fits_several_times_in_the_bound(bound):
    assert horovod_stall_check_sec(bound) == CHECK_CASES[bound]


def test_the_stack_of_a_running_python_process_names_its_line(tmp_path):
    script = tmp_path / "waits.py"
    script.write_text("import time\n\n\ndef wait_here():\n    time.sleep(60)\n\n\nwait_here()\n")
    child = subprocess.Popen([sys.executable, str(script)], env={**os.environ, "TRAINER_RANK": "2"})
    try:
        time.sleep(1.5)
        text = stacks.stacks("algo-1", [child.pid])
    finally:
        child.kill()
        child.wait()
    assert text.startswith(f"rank 2 (pid {child.pid}) on algo-1:")
    assert "wait_here (waits.py:5)" in text
    assert stall.rank_processes(child.pid) == {}  # it has ended: nothing left to watch


def test_no_stack_when_no_python_process_runs():
    assert stacks.stacks("algo-1", [2 ** 22 + 7]) == "no Python process of the script is running on algo-1"


def waiting_run(*samples, waiting=("r",)):
    progress = stall.Progress(BOUND, names, waiting_margin_sec=30)
    progress.waiting |= set(waiting)
    for at, used in samples:
        progress.cpu_sample(at, used)
    return progress


IDLE_FROM_0 = [(at, {"r": 0.0}) for at in range(0, 131, 10)]
WAITING_CASES = {
    "waiting: not at the bound": (waiting_run(*IDLE_FROM_0[:11]), 100, None),
    "waiting: at the bound and its margin": (waiting_run(*IDLE_FROM_0), 130, "r"),
    "blocked in its own code: at the bound": (waiting_run(*IDLE_FROM_0[:11], waiting=()), 100, "r"),
}


@pytest.mark.parametrize("case", WAITING_CASES)
def test_a_rank_waiting_inside_the_libraries_gets_a_margin_for_the_process_it_waits_for(case):
    progress, now, stalled = WAITING_CASES[case]
    found = progress.stall(now)
    assert (found.who if found else None) == stalled


def test_a_waiting_rank_that_works_again_loses_its_margin():
    progress = waiting_run((0, {"r": 0.0}), (100, {"r": 50.0}))
    assert progress.stall(100) is None and progress.waiting == set()


PY_SPY_DUMP = """Process 20157: python hvd_stall.py
Python v3.11.7 (/usr/bin/python3.11)

Thread 20160 (idle): "grpc_global_timer"
    wait (threading.py:327)
Thread 20157 (idle): "MainThread"
    horovod_allreduce (<string>:58)
    _allreduce (horovod/tensorflow/mpi_ops.py:130)
    main (hvd_stall.py:30)
"""


def test_the_main_threads_innermost_frame_is_read_from_py_spys_dump():
    assert stacks.innermost_file(PY_SPY_DUMP) == "<string>"
    assert stacks.innermost_file("(py-spy could not read it: Permission denied)") is None


@pytest.mark.parametrize("body, in_library", [
    ("import time\n\n\ndef own_work():\n    time.sleep(60)\n\n\nown_work()\n", False),
    ("import queue\n\n\ndef wait_for_a_peer():\n    queue.Queue().get()\n\n\nwait_for_a_peer()\n", True),
], ids=["in its own code", "inside the standard library's queue"])
def test_a_process_is_told_waiting_in_a_library_from_blocked_in_its_own_code(tmp_path, body, in_library):
    (tmp_path / "job.py").write_text(body)
    child = subprocess.Popen([sys.executable, "job.py"], cwd=tmp_path)
    try:
        time.sleep(1.5)
        assert stacks.waits_in_library(child.pid, str(tmp_path)) is in_library
    finally:
        child.kill()
        child.wait()

"""The machine's cores among the test processes (tests/cores.py): tests that need both never
overlap, two that need one each may, and a test that needs none waits for nothing."""
import fcntl
import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest

import cores
from cores import MACHINE_CORES, cores_of, holding

HOLD_SEC = 0.3
MEET_WITHIN_SEC = 60  # a hang guard: how long two holders that may run side by side wait to meet


def hold(cores: int, folder: str, spans, meeting) -> None:
    """Hold `cores`; with a `meeting`, also wait there for the other holder, which gets past
    it only if both hold their cores at once."""
    with holding(cores, folder):
        began = time.monotonic()
        if meeting is not None:
            meeting.wait(MEET_WITHIN_SEC)
        time.sleep(HOLD_SEC)
        spans.append((cores, began, time.monotonic()))


def run_side_by_side(tmp_path, wanted: list[int], meet: bool = False) -> list[tuple[int, float, float]]:
    """Each of `wanted` in a process of its own, all started at once: (cores, began, ended)."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        spans = manager.list()
        meeting = manager.Barrier(len(wanted)) if meet else None
        processes = [context.Process(target=hold, args=(cores, str(tmp_path), spans, meeting)) for cores in wanted]
        for process in processes:
            process.start()
        for process in processes:
            process.join(MEET_WITHIN_SEC + 30)
            assert process.exitcode == 0
        return list(spans)


def overlap(a, b) -> bool:
    return a[1] < b[2] and b[1] < a[2]


CASES = {
    # cores each test wants -> the pairs of tests that may overlap
    "two tests that need the machine: one after the other": ([2, 2], False),
    "the machine and one core: one after the other": ([2, 1], False),
    "one core each: side by side": ([1, 1], True),
    "none and the machine: side by side": ([0, 2], True),
}


@pytest.mark.parametrize("case", CASES)
def test_tests_share_the_cores(tmp_path, case):
    wanted, side_by_side = CASES[case]
    # Those that may run side by side must meet while holding their cores (however loaded the
    # machine); the others are timed, and the locks alone keep them apart.
    spans = run_side_by_side(tmp_path, wanted, meet=side_by_side)
    assert sorted(cores for cores, *_ in spans) == sorted(wanted)
    assert overlap(*spans) == side_by_side, spans


def test_three_tests_of_one_core_take_turns(tmp_path):
    """Never more than two at a time: one of the three waits for a core."""
    spans = run_side_by_side(tmp_path, [1, 1, 1])
    at_once = max(sum(1 for other in spans if other[1] <= span[1] < other[2]) for span in spans)
    assert len(spans) == 3 and at_once <= MACHINE_CORES, spans


class Item:
    def __init__(self, *markers):
        self.markers = {marker.name: marker for marker in markers}

    def get_closest_marker(self, name):
        return self.markers.get(name)


@pytest.mark.parametrize("markers, expected", [
    ((), 0), ((pytest.mark.slow.mark,), 2), ((pytest.mark.slow.mark, pytest.mark.cores.with_args(1).mark), 1),
    ((pytest.mark.cores.with_args(0).mark, pytest.mark.slow.mark), 0),
], ids=["fast", "slow", "slow, one core", "slow, waits only"])
def test_what_a_test_needs(markers, expected):
    assert cores_of(Item(*markers)) == expected


def take_turns(folder: str, cores: int, spans, times: int) -> None:
    for _ in range(times):
        hold(cores, folder, spans, None)


def test_a_test_waiting_for_both_cores_goes_before_the_next_of_a_run_of_one_core_tests(tmp_path):
    """One test process runs 1-core tests back to back; the other's test that needs both
    cores does not wait for all of them: it runs as soon as the current one ends."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        spans = manager.list()
        chain = context.Process(target=take_turns, args=(str(tmp_path), 1, spans, 5))
        chain.start()
        while not os.path.exists(tmp_path / "core-0") and chain.is_alive():  # the first 1-core test runs
            time.sleep(0.05)
        hold(2, str(tmp_path), spans, None)
        chain.join(MEET_WITHIN_SEC)
        order = [cores for cores, began, _ in sorted(spans, key=lambda span: span[1])]
    assert order.count(1) == 5 and order.index(2) <= 2, order


def hold_for(folder: str, cores: int, seconds: float, spans) -> None:
    with holding(cores, folder):
        began = time.monotonic()
        time.sleep(seconds)
        spans.append((cores, began, time.monotonic()))


def test_a_test_waiting_for_both_cores_leaves_the_free_one_to_a_test_that_needs_one(tmp_path):
    """A 1-core test runs; a 2-core test asks, then another 1-core test: that one takes the
    free core at once rather than queue behind the 2-core test, which runs once both are free."""
    context = multiprocessing.get_context("fork")
    with context.Manager() as manager:
        spans = manager.list()
        first = context.Process(target=hold_for, args=(str(tmp_path), 1, 3.0, spans))
        first.start()
        while not os.path.exists(tmp_path / "core-0"):  # the first test's lock files are there
            time.sleep(0.05)
        time.sleep(0.5)  # and it holds a core
        both = context.Process(target=hold_for, args=(str(tmp_path), 2, HOLD_SEC, spans))
        both.start()
        time.sleep(0.5)  # the 2-core test is waiting
        hold_for(str(tmp_path), 1, HOLD_SEC, spans)
        for process in (first, both):
            process.join(MEET_WITHIN_SEC)
            assert process.exitcode == 0
        (_, first_began, first_ended), (_, second_began, second_ended) = sorted(
            (span for span in spans if span[0] == 1), key=lambda span: span[1])
        (_, both_began, _), = [span for span in spans if span[0] == 2]
    assert second_began < first_ended, spans  # side by side with the first
    assert both_began >= max(first_ended, second_ended), spans  # alone


def test_the_cpu_log_is_summed_by_tier_and_its_slowest_tests_listed(tmp_path):
    log = tmp_path / "cores.jsonl"
    rows = [("tests/unit/test_a.py::test_x", 0, 0.0, 1.0, 1.5, 1.0),
            ("tests/container/test_b.py::test_y[p]", 2, 5.0, 90.0, 170.0, 45.0),
            ("tests/container/test_b.py::test_z", 2, 0.0, 30.0, 40.0, 33.0)]
    log.write_text("".join(json.dumps({"test": test, "cores": cores, "waited_sec": waited, "wall_sec": wall,
                                       "machine_cpu_sec": cpu, "own_cpu_sec": own}) + "\n"
                           for test, cores, waited, wall, cpu, own in rows))
    done = subprocess.run([sys.executable, os.path.join(os.path.dirname(cores.__file__), "cores.py"), str(log)],
                          capture_output=True, text=True, check=True)
    lines = done.stdout.splitlines()
    assert lines[1].split() == ["container", "2", "120", "5", "210", "78"]  # the longest tier first
    assert lines[2].split() == ["unit", "1", "1", "0", "2", "1"]
    assert lines[3] == "cores held: 240 core-s, at least 2.0 min on 2 cores"
    assert lines[5].split() == ["90.0", "2", "0.5", "tests/container/test_b.py::test_y[p]"]  # held 2, kept 0.5 busy
    assert lines[-1].split() == ["1.0", "0", "1.0", "tests/unit/test_a.py::test_x"]


def test_a_test_s_own_cpu_counts_the_jobs_it_ran(tmp_path):
    """What a test's subprocesses spent is its own, the machine's other work is not."""
    before = cores.own_cpu_sec()
    subprocess.run([sys.executable, "-c", "import time\nend = time.process_time() + 0.5\n"
                    "while time.process_time() < end: pass"], check=True)
    assert cores.own_cpu_sec() - before >= 0.5


@pytest.mark.parametrize("fixturenames, expected", [
    (["tmp_path", "sdk_path"], []),
    (["image", "tmp_path"], ["/c/image-2.14-cpu.lock"]),
    (["image_2_21", "image"], ["/c/image-2.21-cpu.lock", "/c/image-2.14-cpu.lock"]),
], ids=["no image", "the 2.14 image", "the 2.21 image, after the 2.14 one"])
def test_the_builds_a_test_waits_for_before_its_cores(fixturenames, expected):
    locks = {"image": "/c/image-2.14-cpu.lock", "image_2_21": "/c/image-2.21-cpu.lock"}
    assert cores.builds_to_wait_for(fixturenames, locks) == expected


def test_a_test_takes_its_cores_once_the_build_it_waits_for_has_ended(tmp_path):
    """A build holding its lock (a real flock, in another process) keeps the test waiting
    until it lets go; a build that never started keeps no one waiting."""
    lock = tmp_path / "image-2.14-cpu.lock"
    built = tmp_path / "built"  # the build's last act before it lets go of its lock
    build = subprocess.Popen(["flock", str(lock), "sh", "-c", f"sleep 1; touch {built}"])
    try:
        deadline = time.monotonic() + 30
        while not held_by_another(lock):  # until the build holds it
            assert build.poll() is None and time.monotonic() < deadline
            time.sleep(0.02)
        cores.wait_for_builds([str(lock), str(tmp_path / "never-built.lock")])
        assert built.exists(), "returned while the build still held its lock"
        assert build.wait(timeout=30) == 0
    finally:
        build.kill()
        build.wait()


def held_by_another(path) -> bool:
    if not path.exists():
        return False
    with open(path, "a") as file:
        try:
            fcntl.flock(file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return False
        except BlockingIOError:
            return True

"""A user's script that stalls ends within stall_timeout_sec, named, with each rank's line
(trainer.script.stall), and one that only pauses is not cut: real Horovod over Open MPI on
simulated hosts through `trainer local`, the script unchanged (tests/scripts/hvd_stall.py).
The bound is scaled down to 30 s here (default 900 s)."""
import datetime
import os
import re
import time

import pytest

from bounds import END_GRACE_SEC, within
from conftest import PROJECT_ROOT, pids_of, run_local
from trainer.script.stall import OTHER_HOSTS_STACKS_SEC, waiting_margin_sec

pytestmark = pytest.mark.slow
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")
BOUND_SEC = 30
MPI_2 = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2}


def stall_job(**hyperparameters) -> dict:
    return {"sagemaker_program": "hvd_stall.py", "sagemaker_submit_directory": SCRIPTS,
            "stall_timeout_sec": BOUND_SEC, **MPI_2, **hyperparameters}


def log_time(log: str, pattern: str) -> float:
    """The time (seconds) of the first log line matching `pattern`, whose group 1 is its stamp."""
    found = re.search(pattern, log)
    assert found, pattern
    return datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


def failure_of(tmp_path, host: str) -> str:
    with open(os.path.join(tmp_path, host, "output", "failure")) as f:
        return f.read()


def test_a_horovod_rank_that_skips_an_allreduce_ends_the_job_named_with_its_line(aws_split, tmp_path):
    started = time.monotonic()
    run = run_local(tmp_path, aws_split, stall_job(), hosts=2, timeout=400)
    took = time.monotonic() - started
    assert run.exit_code == 3, run.log[-4000:]  # stalled
    first = run.failure.splitlines()[0]
    assert re.fullmatch(r"script hvd_stall\.py: rank 3 on algo-2 made no progress for \d+ s: never joined the "
                        r"Horovod collective the other ranks wait in .*stall_timeout_sec.*", first), first
    # The master's ranks wait in the allreduce the last rank skipped ...
    assert re.search(r"rank 0 \(pid \d+\) on algo-1:\n.*\n(.*\n)*?\s+main \(hvd_stall\.py:30\)", run.failure), run.failure
    # ... and the other host's stacks show where rank 3 is instead.
    other = failure_of(tmp_path, "algo-2")
    assert re.search(r"rank 3 \(pid \d+\) on algo-2:\n.*\n\s+write_the_report_alone \(hvd_stall\.py:\d+\)", other), other
    # The bound, the margin of ranks idle in the collective, the other hosts' stacks, the ranks' end.
    assert took < within(BOUND_SEC + waiting_margin_sec(BOUND_SEC) + OTHER_HOSTS_STACKS_SEC + END_GRACE_SEC), took
    assert not pids_of("hvd_stall.py", {"TRAINER_RANK": "3"})  # the stalled rank is not left behind


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_pause_longer_than_horovods_check_and_shorter_than_the_bound_is_not_cut(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, stall_job(skip=0, pause_sec=BOUND_SEC * 2 // 3), timeout=300)
    assert run.exit_code == 0, run.log[-4000:]
    assert "rank 1: 2 ranks met" in run.log and "made no progress" not in run.log


@pytest.mark.cores(1)  # two hosts, one stopped and one waiting for it: under one core (measured)
def test_a_multi_worker_mirrored_worker_that_stops_inside_a_step_is_named_by_both_hosts(aws_split, tmp_path):
    """The second worker stops in its third step; the first waits for it in the all-reduce,
    inside TensorFlow, so the stopped one's host names it first and the other host ends with it."""
    run = run_local(tmp_path, aws_split, {
        "sagemaker_program": "mwms_train.py", "sagemaker_submit_directory": SCRIPTS, "model_dir": "/opt/ml/model",
        "sagemaker_multi_worker_mirrored_strategy_enabled": "true", "stall_timeout_sec": BOUND_SEC,
        "stall_on_worker": 1}, hosts=2, timeout=400)
    assert run.exit_code != 0, run.log[-4000:]
    stopped = failure_of(tmp_path, "algo-2")
    named = r"script mwms_train\.py: rank 1 \(pid \d+\) on algo-2 made no progress for \d+ s: its processes used"
    assert re.match(named, stopped), stopped
    assert re.search(r"\n\s+stop_here \(mwms_train\.py:\d+\)", stopped), stopped
    waiting = failure_of(tmp_path, "algo-1")
    assert re.search(named, waiting.splitlines()[0]), waiting
    assert "the stacks of the processes on algo-1 then:\nrank 0 (pid" in waiting, waiting


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_parameter_server_master_whose_worker_left_ends_within_the_bound(aws_split, tmp_path):
    """The worker's script returns while the master trains: TensorFlow's coordinator retries
    it (as for a preempted worker), busy, inside TensorFlow; a script that has ended never
    answers again, so the job ends the bound after TensorFlow first says it cannot reach it."""
    run = run_local(tmp_path, aws_split, {
        "sagemaker_program": "ps_train.py", "sagemaker_submit_directory": SCRIPTS, "model_dir": "/opt/ml/model",
        "sagemaker_parameter_server_enabled": "true", "stall_timeout_sec": BOUND_SEC, "steps_per_epoch": 100000,
        "worker_leaves_after_sec": 25}, hosts=2, timeout=400)
    (tmp_path / "job.log").write_text(run.log)
    assert run.exit_code != 0, run.log[-4000:]
    first = failure_of(tmp_path, "algo-1").splitlines()[0]
    assert re.match(r"script ps_train\.py: rank 0 \(pid \d+\) on algo-1 made no progress for \d+ s: waiting inside "
                    r"TensorFlow for another process of the job, which has ended \(TensorFlow's last word: rank 1 on "
                    r"algo-2 cannot be reached", first), first
    assert "the worker leaves" in run.log
    assert re.search(r"\n\s+main \(ps_train\.py:\d+\)", failure_of(tmp_path, "algo-1"))
    # From the log's warning (TensorFlow cannot reach the ended host) to the job's end: the
    # bound, one poll of the watch, and the stacks the other host is given to take.
    said = log_time(run.log, r"\[algo-1\] (\S+ \S+) WARNING trainer: TensorFlow on algo-1 says: rank 1 on algo-2 cannot")
    ended = log_time(run.log, r"\[algo-1\] (\S+ \S+) ERROR trainer: script ps_train\.py: rank 0 .* made no progress")
    assert ended - said <= within(BOUND_SEC + OTHER_HOSTS_STACKS_SEC), (said, ended)

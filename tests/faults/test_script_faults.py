"""Faults of a user's training script, for real: SIGTERM to a script job mid-training, and
a rank of a Horovod script killed. Each asserts the exit status, the failure file's first
line and, as a hang guard, a bound on the time to end; no script process outlives the job."""
import os
import re
import signal
import time

import pytest

from bounds import END_GRACE_SEC, FOLLOW_MARGIN_SEC, PEER_LOST_SEC, STOP_GRACE_SEC, within
from conftest import PROJECT_ROOT, pids_of
from test_process_faults import kill_and_time
from watched import WatchedJob, first_line

pytestmark = pytest.mark.slow
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")


def script(program: str, **hyperparameters) -> dict:
    return {"sagemaker_program": program, "sagemaker_submit_directory": SCRIPTS, **hyperparameters}


@pytest.mark.cores(1)
def test_sigterm_reaches_the_script_and_ends_the_job(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, script("keras_train.py", epochs=1000))
    job.wait_for(r"Epoch 2/1000")
    run, seconds = kill_and_time(job, job.process.pid, signal.SIGTERM)  # trainer local passes it on, as SageMaker does
    line = first_line(run)
    assert run.exit_code == 143, run.log[-3000:]
    assert line == "stopped by SIGTERM: script keras_train.py (rank 0 on algo-1) was killed by signal 15 (SIGTERM)", line
    assert seconds < within(STOP_GRACE_SEC + FOLLOW_MARGIN_SEC)  # a script's grace
    assert not pids_of("keras_train.py", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job")})
    record_fault("SIGTERM to a training script's job (the script has no handler of its own)", line, seconds)


def test_a_killed_rank_of_a_horovod_script_ends_every_rank_and_is_named(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, script("hvd_train.py", epochs=1000, sagemaker_mpi_enabled="true",
                                                         sagemaker_mpi_num_of_processes_per_host=2))
    job.wait_for(r"Epoch 2/1000")
    rank_1 = pids_of("hvd_train.py", {"OMPI_COMM_WORLD_RANK": "1", "SAGEMAKER_BASE_DIR": str(tmp_path / "job")})
    assert len(rank_1) == 1, rank_1
    run, seconds = kill_and_time(job, rank_1[0])
    line = first_line(run)
    assert run.exit_code != 0
    assert line.startswith("script hvd_train.py (rank 1 on algo-1) was killed by signal 9 (SIGKILL)"), line
    assert seconds < within(END_GRACE_SEC)
    assert not pids_of("hvd_train.py", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job")})
    record_fault("a rank of a Horovod training script killed (SIGKILL)", line, seconds)


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_failed_host_ends_the_other_hosts_script(aws_split, tmp_path, record_fault):
    """Multi-worker mirrored: the second host's script fails before it joins; the first
    host's script, waiting for it in TensorFlow, is ended by the container and names it."""
    job = WatchedJob(tmp_path / "job", aws_split, script(
        "mwms_train.py", epochs=1, fail_on_worker=1, sagemaker_multi_worker_mirrored_strategy_enabled="true"),
        hosts=2)
    job.wait_for(r"running mwms_train.py \(rank 1 on algo-2\)")
    failed = time.monotonic()
    run = job.finish(timeout=within(STOP_GRACE_SEC + FOLLOW_MARGIN_SEC))  # a hang guard
    seconds = time.monotonic() - failed
    line = first_line(run)  # the first host's
    assert run.exit_code == 1, run.log[-3000:]
    assert line == ("algo-1: algo-2 failed: script mwms_train.py (rank 1 on algo-2) exited with code 1: "
                    "RuntimeError: worker 1 cannot go on"), line
    assert seconds < within(PEER_LOST_SEC)
    assert not pids_of("mwms_train.py", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job" / "algo-1")})
    record_fault("multi-worker mirrored training script: the second host's script fails, the first host's "
                 "failure file (time from the second host's start)", line, seconds)


@pytest.mark.cores(1)
def test_a_script_that_ignores_sigterm_is_killed_after_its_grace(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, script("keras_train.py", epochs=1000, ignore_sigterm=1,
                                                         stop_grace_sec=3))
    job.wait_for(r"Epoch 2/1000")
    run, seconds = kill_and_time(job, job.process.pid, signal.SIGTERM)
    line = first_line(run)
    assert run.exit_code == 143, run.log[-3000:]
    assert line == "stopped by SIGTERM: script keras_train.py (rank 0 on algo-1) was killed by signal 9 (SIGKILL)", line
    assert "still running 3 s after SIGTERM: killed" in run.log
    # Where the script was when it was killed (it trains: its stack is inside Keras' fit).
    assert re.search(r"when they were killed:\nrank 0 \(pid \d+\) on algo-1:\n(.*\n)*?.*\(keras_train\.py:\d+\)",
                     run.failure), run.failure
    assert 3 <= seconds < within(3 + END_GRACE_SEC)  # stop_grace_sec=3
    record_fault("a training script that ignores SIGTERM (stop_grace_sec=3)", line, seconds)


def test_a_lost_worker_host_ends_the_master_s_script(aws_split, tmp_path, record_fault):
    """Parameter servers: the second host's script (a worker task) is killed. TensorFlow's
    coordinator in the master's script would wait for that worker to come back; the
    container ends the master's script and names the worker's host and what happened."""
    job = WatchedJob(tmp_path / "job", aws_split, script(
        "ps_train.py", epochs=1000, steps_per_epoch=20, sagemaker_parameter_server_enabled="true"), hosts=2)
    job.wait_for(r"Epoch 2/1000")
    worker = pids_of("ps_train.py", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job" / "algo-2")})
    assert len(worker) == 1, worker
    run, seconds = kill_and_time(job, worker[0])
    line = first_line(run)  # the first host's
    assert run.exit_code == 1, run.log[-3000:]
    assert line == ("algo-1: algo-2 failed: script ps_train.py (rank 1 on algo-2) was killed by signal 9 "
                    "(SIGKILL)"), line
    assert seconds < within(PEER_LOST_SEC)
    record_fault("parameter-server training script: the worker host's script killed (SIGKILL), the master's "
                 "failure file", line, seconds)

"""Process faults, for real: a stalled input, a rank killed with SIGKILL, a parameter-server
task killed, SIGTERM mid-epoch and the resume after it. Each asserts the exit status, the
failure file's first line and how long the job took to end."""
import os
import re
import signal
import time

import pytest

from bounds import END_GRACE_SEC, FOLLOW_MARGIN_SEC, PEER_LOST_SEC, STOP_GRACE_SEC, within
from conftest import pids_of, run_local
from watched import WatchedJob, first_line

pytestmark = pytest.mark.slow

STALLING_PARSER = '''
import time
import tensorflow as tf
from trainer.data.records import batch_parser

windows = [0]

def _second_window_never_comes(serialized):
    windows[0] += 1
    if windows[0] > 1:  # an input that stops delivering, as a stalled stream does
        time.sleep(3600)
    return serialized

def parse_fn(serialized, hp):
    serialized = tf.py_function(_second_window_never_comes, [serialized], tf.string)
    serialized.set_shape([None])
    return batch_parser("tfrecord", hp["field_size"])(serialized)
'''


@pytest.mark.cores(1)
def test_a_stalled_input_ends_the_job_with_the_stacks(aws_split, tmp_path, record_fault):
    module = tmp_path / "stalling.py"
    module.write_text(STALLING_PARSER)
    stall_sec = 15
    started = time.monotonic()
    run = run_local(tmp_path / "job", aws_split, {"user_module": str(module), "shuffle_buffer": 1024,
                                                  "cache_input": "false", "stall_timeout_sec": stall_sec,
                                                  "log_steps": 2})  # calls of 2 steps: some complete
    seconds = time.monotonic() - started
    assert run.exit_code == 3, run.log[-3000:]
    line = first_line(run)
    # Which window blocks depends on the order the parallel map starts its calls: steps may or may not have run.
    assert re.match(r"rank 0 on algo-1: no progress for \d+ s while training epoch 1 \((last step \d+|no step yet)\)",
                    line), line
    assert "every thread's stack is in the log" in line
    assert "Thread 0x" in run.log and "_second_window_never_comes" in run.log  # faulthandler's dump
    assert seconds < within(stall_sec + END_GRACE_SEC)  # timed from the job's start
    record_fault(f"no progress for stall_timeout_sec (here {stall_sec} s; time from the job's start): "
                 "a stalled input", line, seconds)


def kill_and_time(job, pid, signal_number=signal.SIGKILL):
    """Signal `pid`; the job's run and the seconds from the signal to its end (a hang guard:
    the longest bound of the faults timed here, a stop's)."""
    os.kill(pid, signal_number)
    killed = time.monotonic()
    run = job.finish(timeout=within(STOP_GRACE_SEC + FOLLOW_MARGIN_SEC))
    return run, time.monotonic() - killed


# Horovod's ranks, and local SGD's (MPI's own collectives, no Horovod): mpirun ends the others.
@pytest.mark.parametrize("distribution, ranks", [("horovod", "a Horovod rank"), ("local_sgd", "a local SGD rank")])
def test_a_killed_mpi_rank_ends_every_rank_and_is_named(aws_split, tmp_path, record_fault, distribution, ranks):
    job = WatchedJob(tmp_path / "job", aws_split, {"distribution": distribution, "processes_per_host": 2,
                                                   "num_epochs": 1000, "log_steps": 10})
    job.wait_for(r" step=\d+ epoch=")
    rank_1 = pids_of("trainer", {"OMPI_COMM_WORLD_RANK": "1", "SAGEMAKER_BASE_DIR": str(tmp_path / "job")})
    assert len(rank_1) == 1, rank_1
    run, seconds = kill_and_time(job, rank_1[0])
    assert run.exit_code != 0
    assert first_line(run) == "rank 1 on algo-1 was killed by signal 9 (SIGKILL); the other processes were ended because of it"
    assert seconds < within(END_GRACE_SEC)  # mpirun ends the others; then their launcher
    assert not pids_of("trainer", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job")})  # no process outlives the job
    record_fault(f"{ranks} killed (SIGKILL, as the OOM killer does)", first_line(run), seconds)


def test_a_killed_parameter_server_task_ends_the_job_and_is_named(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, {"distribution": "parameter_server", "num_epochs": 1000}, hosts=2)
    job.wait_for(r"epoch=1 steps=\d+")
    second_host = str(tmp_path / "job" / "algo-2")
    ps = pids_of("trainer.worker --serve ps", {"SAGEMAKER_BASE_DIR": second_host})
    assert len(ps) == 1, ps
    run, seconds = kill_and_time(job, ps[0])
    assert run.exit_code != 0
    with open(os.path.join(second_host, "output", "failure")) as f:
        line = f.readline().strip()
    assert line == "ps task on algo-2 was killed by signal 9 (SIGKILL)", line
    assert first_line(run).startswith("chief on algo-1: "), first_line(run)  # the coordinator: a consequence
    assert seconds < within(PEER_LOST_SEC)
    assert not pids_of("trainer", {"SAGEMAKER_BASE_DIR": second_host})
    record_fault("a parameter-server task killed (SIGKILL), its host's failure file", line, seconds)


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_killed_multi_worker_mirrored_worker_is_named_by_the_chief(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, {"distribution": "multi_worker_mirrored", "num_epochs": 1000,
                                                   "log_steps": 10}, hosts=2)
    job.wait_for(r" step=\d+ epoch=")
    worker = pids_of("trainer.commands.train", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job" / "algo-2")})
    assert len(worker) == 1, worker
    run, seconds = kill_and_time(job, worker[0])  # the whole host's `train`, as when an instance is lost
    assert run.exit_code != 0
    # TensorFlow notices by a heartbeat or a broken connection, whichever comes first: both name the worker.
    assert re.match(r"rank 0 on algo-1: rank 1 on algo-2 (stopped answering|cannot be reached) \(.+\): it failed, "
                    r"was preempted or crashed; see its own log$", first_line(run)), first_line(run)
    assert seconds < within(PEER_LOST_SEC)
    record_fault("a multi-worker mirrored worker killed (SIGKILL), the chief's failure file", first_line(run),
                 seconds)


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
    """Enough rows for epochs of a few seconds (over 200 steps a worker on two hosts): SIGTERM
    lands inside one."""
    from trainer.data import datagen

    return datagen.generate(str(tmp_path_factory.mktemp("generated")), 120_000, 20_000, files=4)


@pytest.mark.cores(1)
def test_sigterm_saves_and_the_next_run_resumes_where_it_stopped(generated, tmp_path, record_fault):
    channels = {"training": generated["train"], "evaluation": generated["eval"]}
    hp = {"num_epochs": 2, "log_steps": 32}
    whole = run_local(tmp_path / "whole", channels, hp)
    assert whole.exit_code == 0, whole.log[-3000:]

    job = WatchedJob(tmp_path / "stopped", channels, hp)
    job.wait_for(r" step=\d+ epoch=1 ")
    run, seconds = kill_and_time(job, job.process.pid, signal.SIGTERM)  # trainer local passes it on, as SageMaker does
    assert run.exit_code == 143, run.log[-3000:]
    line = first_line(run)
    assert line.startswith("rank 0 on algo-1: stopped by SIGTERM at step ") and "steps into epoch 1)" in line, line
    assert line.endswith(f"checkpoint saved in {tmp_path / 'stopped' / 'checkpoints'}: "
                         "a job started again with it resumes there")
    assert seconds < within(STOP_GRACE_SEC)
    record_fault("SIGTERM (a stop, a spot interruption) mid-epoch", line, seconds)

    resumed = run_local(tmp_path / "stopped", channels, hp)
    assert resumed.exit_code == 0, resumed.log[-3000:]
    assert "steps into epoch 1)" in resumed.log and "epoch=1 resuming after its first " in resumed.log
    assert resumed.metrics["steps"] == whole.metrics["steps"]
    assert resumed.metrics["epochs"] == whole.metrics["epochs"] == 2
    # Asynchronous updates: the order of the workers' steps differs from run to run, and with it
    # the AUC of these 2-epoch jobs (by 0.0101 in one run of this test), resumed or not.
    assert abs(resumed.metrics["eval_auc"] - whole.metrics["eval_auc"]) <= 0.02, (resumed.metrics, whole.metrics)


@pytest.mark.parametrize("distribution, how", [
    pytest.param("multi_worker_mirrored", "they vote in every step", marks=pytest.mark.cores(1)),  # about one core busy
    ("local_sgd", "the next average tells every rank"),  # (measured: TRAINER_TEST_CPU_LOG)
])
def test_sigterm_to_one_host_stops_all_at_one_step_and_resumes(generated, tmp_path, record_fault, distribution, how):
    channels = {"training": generated["train"], "evaluation": generated["eval"]}
    hp = {"distribution": distribution, "num_epochs": 2, "log_steps": 32}
    whole = run_local(tmp_path / "whole", channels, hp, hosts=2)
    assert whole.exit_code == 0, whole.log[-3000:]

    job = WatchedJob(tmp_path / "stopped", channels, hp, hosts=2)
    job.wait_for(r" step=\d+ epoch=1 ")
    # SageMaker signals each host on its own: here the worker's host alone, the hardest case
    # (the chief, still stepping, would wait in the all-reduce if the workers did not vote).
    worker = pids_of("trainer.commands.train", {"SAGEMAKER_BASE_DIR": str(tmp_path / "stopped" / "algo-2")})
    assert len(worker) == 1, worker
    run, seconds = kill_and_time(job, worker[0], signal.SIGTERM)
    assert run.exit_code == 143, run.log[-3000:]
    line = first_line(run)
    assert line.startswith("rank 0 on algo-1: stopped by SIGTERM at step ") and "steps into epoch 1)" in line, line
    assert line.endswith("a job started again with it resumes there"), line
    step = re.search(r"at step (\d+) ", line).group(1)
    assert f"rank 1 on algo-2: stopped by SIGTERM at step {step} " in run.log  # the same step on both
    assert seconds < within(STOP_GRACE_SEC)
    record_fault(f"SIGTERM to one {distribution} host mid-epoch ({how}), the chief's failure file", line, seconds)

    resumed = run_local(tmp_path / "stopped", channels, hp, hosts=2)
    assert resumed.exit_code == 0, resumed.log[-3000:]
    assert "epoch=1 resuming after its first " in resumed.log
    assert resumed.metrics["steps"] == whole.metrics["steps"]
    # Asynchronous updates: the order of the workers' steps differs from run to run, and with it
    # the AUC of these 2-epoch jobs (by 0.0101 in one run of this test), resumed or not.
    assert abs(resumed.metrics["eval_auc"] - whole.metrics["eval_auc"]) <= 0.02, (resumed.metrics, whole.metrics)


def test_sigterm_to_parameter_servers_in_pipe_mode_saves_and_each_worker_resumes_where_it_stopped(
        generated, tmp_path, record_fault):
    """The coordinator stops at its next call, saves how far each worker got, and the next run
    has each worker skip what it trained: the job ends with the steps of an uninterrupted one."""
    channels = {"training": generated["train"], "evaluation": generated["eval"]}
    hp = {"distribution": "parameter_server", "num_epochs": 2, "log_steps": 32}
    whole = run_local(tmp_path / "whole", channels, hp, input_mode="Pipe", hosts=2)
    assert whole.exit_code == 0, whole.log[-3000:]

    job = WatchedJob(tmp_path / "stopped", channels, hp, input_mode="Pipe", hosts=2)
    job.wait_for(r" step=\d+ epoch=1 ")
    run, seconds = kill_and_time(job, job.process.pid, signal.SIGTERM)  # to every host, as SageMaker does
    assert run.exit_code == 143, run.log[-3000:]
    line = first_line(run)
    assert line.startswith("chief on algo-1: stopped by SIGTERM at step ") and "steps into epoch 1)" in line, line
    assert seconds < within(STOP_GRACE_SEC)
    record_fault("SIGTERM to parameter servers in Pipe mode mid-epoch, the coordinator's failure file", line, seconds)

    resumed = run_local(tmp_path / "stopped", channels, hp, input_mode="Pipe", hosts=2)
    assert resumed.exit_code == 0, resumed.log[-3000:]
    skipped = re.search(r"each worker skips the batches of this epoch it trained before the stop: "
                        r"algo-1 (\d+), algo-2 (\d+)", resumed.log)
    assert skipped, resumed.log[-3000:]
    stopped_at = int(re.search(r"at step (\d+) ", line).group(1))
    assert int(skipped.group(1)) + int(skipped.group(2)) == stopped_at
    assert resumed.metrics["steps"] == whole.metrics["steps"]  # every record of each worker once an epoch
    # Asynchronous updates: the order of the workers' steps differs from run to run, and with it
    # the AUC of these 2-epoch jobs (by 0.0101 in one run of this test), resumed or not.
    assert abs(resumed.metrics["eval_auc"] - whole.metrics["eval_auc"]) <= 0.02, (resumed.metrics, whole.metrics)

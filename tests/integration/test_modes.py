"""Every single-host mode for real: tower and mirrored replicas, Horovod ranks over mpirun."""
import math
import os
import time

import pytest

from conftest import run_local
from tensorboard_events import runs, series
from test_train_local import assert_tensorboard_curves, check_saved_model
from trainer.data.split import split

pytestmark = pytest.mark.slow
MPI_2 = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2"}


@pytest.fixture(scope="module")
def halves(aws_split, tmp_path_factory):
    """The 8,000 training records as two channels of 4,000."""
    folder = tmp_path_factory.mktemp("halves")
    paths = [str(folder / "t1.tfrecords"), str(folder / "t2.tfrecords")]
    split(aws_split["training"], [4000, 4000], paths)
    return paths


def assert_trained(run, steps, world_size, global_batch):
    assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
    metrics = run.metrics
    assert metrics["steps"] == steps and metrics["epochs"] == 3
    assert metrics["world_size"] == world_size and metrics["global_batch_size"] == global_batch
    assert metrics["eval_auc"] >= 0.69, metrics
    check_saved_model(os.path.join(run.job_dir, "model", "1"))
    return metrics


@pytest.mark.line("2.14", "2.21")
@pytest.mark.cores(1)
@pytest.mark.parametrize("mode", ["tower", "mirrored"])
def test_replicas_in_one_process(aws_split, tmp_path, mode):
    run = run_local(tmp_path, aws_split, {"distribution": mode, "replicas": 2})
    assert_trained(run, steps=3 * 16, world_size=1, global_batch=512)  # 8,000 / (2 x 256) per epoch
    assert f"distribution: {mode}" in run.log


def test_horovod_two_ranks_file_mode(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, {**MPI_2, "log_steps": "4"})
    metrics = assert_trained(run, steps=3 * 16, world_size=2, global_batch=512)  # 4,000 per rank
    root = os.path.join(run.job_dir, "output", "tensorboard")
    assert runs(root) == {"train": 1, "epoch": 1, "rank-0": 1, "rank-1": 1}  # one writer per run
    assert_tensorboard_curves(root, 3, metrics["history"])
    for rank in (0, 1):  # each rank's own rate, half the job's
        assert series(os.path.join(root, f"rank-{rank}"), "samples_per_sec")
    assert metrics["distribution"] == "horovod"
    assert "shared channel, FullyReplicated: shard(world_size, rank)" in run.log
    assert "--map-by slot:PE=1 --bind-to core" in run.log  # P10
    assert run.log.count("exported SavedModel") == 1  # rank 0 alone writes (P8)


def test_more_horovod_ranks_than_cpus(aws_split, tmp_path):
    """More ranks than the host's CPUs (2 vCPUs here, or fewer where the test is given fewer):
    not bound to cores (mpirun refuses to bind two ranks to one core), and a waiting rank
    yields its CPU; the job trains as with fewer ranks."""
    ranks = 2 * len(os.sched_getaffinity(0))
    run = run_local(tmp_path, aws_split, {"sagemaker_mpi_enabled": "true", "num_epochs": 1,
                                          "sagemaker_mpi_num_of_processes_per_host": str(ranks)})
    assert run.exit_code == 0 and run.succeeded, run.log[-4000:]
    assert run.metrics["world_size"] == ranks and run.metrics["steps"] == math.ceil(math.ceil(8000 / ranks) / 256)
    assert f"{ranks} ranks per host on {ranks // 2} vCPU(s), more ranks than CPUs" in run.log
    assert "--bind-to none -mca mpi_yield_when_idle 1" in run.log


def test_horovod_two_ranks_pipe_mode(halves, aws_split, tmp_path):
    channels = {"training-1": halves[0], "training-2": halves[1], "evaluation": aws_split["evaluation"]}
    run = run_local(tmp_path, channels, MPI_2, input_mode="Pipe")
    assert_trained(run, steps=3 * 16, world_size=2, global_batch=512)
    assert "one channel per process" in run.log


def test_horovod_unequal_shards_run_equal_steps(halves, aws_split, tmp_path):
    """P5: rank 1's channel holds a quarter of rank 0's; both stop at its step count."""
    small = str(tmp_path / "small.tfrecords")
    split(halves[1], [1000], [small])
    channels = {"training-1": halves[0], "training-2": small, "evaluation": aws_split["evaluation"]}
    run = run_local(tmp_path / "job", channels, MPI_2)
    assert run.exit_code == 0, run.log[-4000:]
    assert run.metrics["steps"] == 3 * 4  # ceil(1,000 / 256) per epoch, on both ranks


@pytest.mark.cores(1)
def test_horovod_pipe_mode_with_too_few_channels_fails_fast(aws_split, tmp_path):
    started = time.monotonic()
    run = run_local(tmp_path, aws_split, MPI_2, input_mode="Pipe", timeout=30)
    seconds = time.monotonic() - started
    assert run.exit_code == 1
    assert run.failure.startswith("Pipe mode: 1 training channel(s) (training) for 2 training processes per host")
    print(f"failed in {seconds:.1f} s")


def test_failing_rank_is_named_and_ends_the_job(aws_split, tmp_path):
    run = run_local(tmp_path, aws_split, {**MPI_2, "horovod_module": "horovod.not_there.keras"}, timeout=120)
    assert run.exit_code == 1
    assert run.failure.splitlines()[0].startswith("rank ")
    assert "hyperparameter 'horovod_module': cannot import 'horovod.not_there.keras'" in run.failure.splitlines()[0]

"""`trainer plan` and `--check-input`: every record read exactly once, 2 hosts x 2 workers."""
import dataclasses
import json
import subprocess
import sys

import pytest

from conftest import PROJECT_ROOT
from trainer.data.split import split

pytestmark = [pytest.mark.slow, pytest.mark.cores(1)]  # one process at a time
MPI_2 = ["--hp", "sagemaker_mpi_enabled=true", "--hp", "sagemaker_mpi_num_of_processes_per_host=2"]


@pytest.fixture(scope="module")
def quarters(aws_split, tmp_path_factory):
    """The 8,000 training records in four files, and as two channels of two files."""
    folder = tmp_path_factory.mktemp("quarters")
    names = ["a", "b", "c", "d"]
    for sub in ("all", "one", "two"):
        (folder / sub).mkdir()
    split(aws_split["training"], [2000] * 4, [str(folder / "all" / f"{n}.tfrecords") for n in names])
    for index, name in enumerate(names):
        target = folder / ("one" if index < 2 else "two") / f"{name}.tfrecords"
        target.write_bytes((folder / "all" / f"{name}.tfrecords").read_bytes())
    return folder


def plan(*args):
    done = subprocess.run([sys.executable, "-m", "trainer", "plan", *args], cwd=PROJECT_ROOT,
                          capture_output=True, text=True, timeout=300)
    return done.returncode, json.loads(done.stdout)


@pytest.mark.parametrize("layout, sharded, sharding", [
    ("shared", False, "shared channel, FullyReplicated: shard(world_size, rank)"),
    ("shared", True, "shared channel, ShardedByS3Key: shard(processes_per_host, local_rank)"),
    ("per-process", False, "one channel per process, FullyReplicated: shard(hosts, host_index)"),
    ("per-process", True, "one channel per process and ShardedByS3Key: no sharding in code"),
])
def test_every_record_is_read_exactly_once(quarters, layout, sharded, sharding):
    if layout == "shared":
        channels = ["--channel", f"training={quarters / 'all'}"]
        names = ["training"]
    else:
        channels = ["--channel", f"training-1={quarters / 'one'}", "--channel", f"training-2={quarters / 'two'}"]
        names = ["training-1", "training-2"]
    shard_options = [option for name in names for option in ("--sharded-channel", name)] if sharded else []
    code, result = plan(*channels, "--hosts", "2", *MPI_2, *shard_options, "--check-input")
    assert code == 0, result
    assert result["plan"]["sharding"] == sharding
    check = result["check_input"]
    assert [r["records"] for r in check["ranks"]] == [2000, 2000, 2000, 2000]
    assert len({r["fingerprint"] for r in check["ranks"]}) == 4  # four different quarters
    assert check["read_by_ranks"] == {"records": 8000, "fingerprint": check["channel_set"]["fingerprint"]}
    assert check["channel_set"]["records"] == 8000 and check["channel_set"]["files"] == 4
    assert check["exactly_once"] is True


def test_a_wrong_shard_is_caught(quarters, tmp_path):
    """The check can fail: with every rank reading everything, records are read four times."""
    from trainer.local import runner
    from trainer.data.check import check_input
    from trainer.contract.job import read_job
    from trainer.planner.planner import make_plan

    local = runner.LocalJob({"training": [str(quarters / "all")]},
                              {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": "2"},
                              hosts=2)
    folders = local.lay_out(str(tmp_path))
    good = make_plan(read_job(folders["algo-1"]))
    wrong = dataclasses.replace(good, processes=tuple(dataclasses.replace(p, shard=(1, 0)) for p in good.processes))
    result = check_input(wrong, folders)
    assert result["read_by_ranks"]["records"] == 4 * 8000 and result["exactly_once"] is False


def test_plan_of_a_cluster_before_paying_for_it(quarters):
    code, result = plan("--channel", f"training={quarters / 'all'}", "--hosts", "4", "--gpus", "8",
                        "--instance-type", "ml.p3.16xlarge")
    assert code == 0
    assert result["tensorflow_line"].startswith("TensorFlow 2.14 line: TensorFlow 2.14.0, oneDNN on Intel OpenMP")
    # Each of a host's 8 processes gets its share of the host's CPUs; this build reads them all.
    assert result["cpu_settings"].startswith("intra_op_threads=") and "OMP_NUM_THREADS=" in result["cpu_settings"]
    assert "reads only" not in result["cpu_settings"]
    assert result["plan"]["mode"] == "horovod" and result["plan"]["world_size"] == 32
    assert result["plan"]["launch"]["kind"] == "sagemaker_mpi"


def test_the_readme_first_example_plans_local_sgd_in_pipe_mode(aws_split):
    """Two CPU hosts in Pipe mode, no distribution, the built-in DeepFM: local SGD (Horovod's
    ranks), a rank per host, each reading its own host's training and evaluation FIFOs."""
    code, result = plan("--channel", f"training={aws_split['training']}", "--channel",
                        f"evaluation={aws_split['evaluation']}", "--hosts", "2", "--input-mode", "Pipe",
                        "--instance-type", "ml.c5.4xlarge", "--hp", "batch_size=512")
    assert code == 0, result
    plan_ = result["plan"]
    assert (plan_["mode"], plan_["input_mode"], plan_["world_size"]) == ("local_sgd", "Pipe", 2)
    assert plan_["reason"].startswith("2 CPU hosts, the built-in DeepFM, TensorFlow ") and (
        ": local_sgd, each host training on its own batches and averaging the model every 64 steps (0.07 MB sent a "
        "step against 1.36 MB of every step's gradients)") in plan_["reason"], plan_["reason"]  # batch 512: twice the rows
    reads = {(p["host"], p["role"]): p["reads"] for p in plan_["processes"]}
    fifos = ["input/data/training_<epoch>", "input/data/evaluation_<epoch>"]
    assert reads == {("algo-1", "chief"): fifos, ("algo-2", "worker"): fifos}


def test_plan_states_an_impossible_job(aws_split):
    code, result = plan("--channel", f"training={aws_split['training']}", "--input-mode", "Pipe", *MPI_2)
    assert code == 1 and "each process needs its own channel" in result["error"]


def test_probe_refuses_a_job_it_cannot_measure(aws_split):
    """--probe measures CPU hosts (its real run is in test_bench's scale test): a GPU job is
    refused before anything runs, with the reason."""
    code, result = plan("--channel", f"training={aws_split['training']}", "--hosts", "2", "--gpus", "1", "--probe")
    assert code == 1 and result["error"] == "--probe measures CPU hosts; this job has GPUs"


@pytest.mark.cores(2)  # two hosts' processes, each host's on a CPU of its own
@pytest.mark.parametrize("mode, note", [
    ("multi_worker_mirrored", None),
    ("parameter_server", "with parameter servers each worker steps on its own, and the first host's coordinator "
                         "shares its CPUs (as it does in the job)"),
], ids=["multi_worker_mirrored", "parameter_server"])
def test_probe_trains_a_tensorflow_cluster_s_step_as_two_hosts_run_it(aws_split, mode, note):
    """--probe of the modes that run TensorFlow's own cluster (Horovod's are in test_bench's
    scale test): the mode's processes for two hosts train on this machine and the one that
    reports gives the step and the bytes of the model's exchange."""
    code, result = plan("--channel", f"training={aws_split['training']}", "--hosts", "2", "--host-cpus", "1",
                        "--hp", f"distribution={mode}", "--probe")
    assert code == 0, result.get("error")
    measured, predicted = result["scaling"]["measured"], result["scaling"]["prediction"]
    assert measured["rank_cpus"] == 1 and measured["two_rank_step_seconds"] > 0
    # The built-in DeepFM's gradients: its dense layers, and its embedding's rows of one batch.
    assert measured["dense_bytes_per_step"] == 485_380 and measured["sparse_bytes_per_step"] == 439_296
    assert predicted["mode"] == mode and predicted["hosts"] == 2 and 0 < predicted["speedup"] <= 2
    notes = result["scaling"]["notes"]
    assert [n for n in notes if n.startswith("with parameter servers")] == ([note] if note else [])


def test_plan_of_an_existing_job_folder(quarters, tmp_path):
    from trainer.local import runner

    local = runner.LocalJob({"training": [str(quarters / "all")]}, {"distribution": "tower", "replicas": "3"})
    folder = local.lay_out(str(tmp_path))["algo-1"]
    code, result = plan("--job-dir", folder, "--check-input")
    assert code == 0, result
    assert result["plan"]["mode"] == "tower" and result["plan"]["replicas_per_process"] == 3
    assert result["plan"]["reason"] == "distribution=tower (hyperparameter)"
    assert result["check_input"]["exactly_once"] and result["check_input"]["read_by_ranks"]["records"] == 8000


def test_plan_of_a_heterogeneous_cluster(quarters):
    """`trainer plan --groups`: the GPU group trains (its plan made for its GPUs), the CPU
    group feeds it, and why; a group layout that cannot be used is an error, in JSON."""
    code, result = plan("--channel", f"training={quarters / 'all'}", "--gpus", "4",
                        "--groups", "dnn=1:ml.p3.8xlarge,data=2:ml.c5.4xlarge")
    assert code == 0, result
    the_plan = result["plan"]
    assert the_plan["mode"] == "horovod" and the_plan["hosts"] == ["algo-1"] and the_plan["world_size"] == 4
    service = the_plan["data_service"]
    assert service["hosts"] == ["algo-2", "algo-3"] and service["why"].startswith(
        "training: dnn (the groups of GPU instance types); feeding them through tf.data service: data")
    assert "static sharding" in service["reading"]
    code, result = plan("--channel", f"training={quarters / 'all'}", "--groups", "a=1:ml.c5.xlarge,b=1:ml.c5.xlarge")
    assert code == 1 and "which of them train is not said" in result["error"]


def test_the_plan_says_what_training_starts_from_and_names_unknown_hyperparameters(aws_split, tmp_path):
    """Before anything runs: another job's checkpoint in the folder warm-starts this one, the
    same job's resumes; a hyperparameter the built-in model does not read is listed."""
    from trainer.contract.checkpoint_folder import CheckpointRecord, write_record

    checkpoints = tmp_path / "checkpoints"
    checkpoints.mkdir()
    (checkpoints / "ckpt-32.index").write_bytes(b"")
    write_record(CheckpointRecord(str(checkpoints / "ckpt-32"), 32, "day-1", 1, 0, 32, None, "adam"))
    common = ["--channel", f"training={aws_split['training']}", "--checkpoint-local-path", str(checkpoints),
              "--hp", "bach_size=64"]
    code, today = plan(*common, "--job-name", "day-2")
    assert code == 0, today
    assert today["start"].startswith(f"warm start (weights, then this job's own epochs from step 0) from checkpoint "
                                     f"{checkpoints}/ckpt-32 (job day-1, 1 epochs done, step 32): written by another job")
    assert today["plan"]["start"]["how"] == "warm_start"
    assert today["unknown_hyperparameters"] == [
        "unknown hyperparameter 'bach_size' (did you mean 'batch_size'?): ignored: no user code to read it"]
    code, restarted = plan(*common, "--job-name", "day-1")
    assert restarted["start"].startswith(f"resume from checkpoint {checkpoints}/ckpt-32 (job day-1, ")

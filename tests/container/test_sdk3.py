"""The image driven by the SageMaker Python SDK's current major version, 3.x (`ModelTrainer`;
no framework estimators), in local-container mode as users run it: the built-in model with
`training_image` and hyperparameters alone (algorithm mode), and a user's script through
`SourceCode(command="train")`, which hands it to the image's `train` (docs/your-script.md).
SDK 3.x's local mode names SageMaker's network interface, ethwe, in containers whose only
interface is eth0: MPI across hosts runs over eth0 (trainer.contract.network)."""
import os
import tarfile

import pytest

from conftest import IMAGE, IMAGE_2_21, PROJECT_ROOT
from mnist_arrays import write_mnist_arrays
from sdk_jobs import (ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, model_trainer_root,  # noqa: F401
                      saved_model_members, sdk3_path, sdk_inputs, sdk_job)

pytestmark = [pytest.mark.slow, pytest.mark.container]

SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")
# A test names the image fixtures it needs: it waits for their builds before it takes its cores.
IMAGES = {"2.14": IMAGE, "2.21": IMAGE_2_21}
# What `train` logs where resourceconfig.json names an interface the container lacks.
ETHWE_TO_ETH0 = "network: resourceconfig.json names the network interface ethwe, which host algo-1 does not have: using eth0"


def model_trainer_job(sdk3_path, tmp_path, job, timeout):
    """One job through ModelTrainer; local folders as its channels (InputData takes paths).
    The result's `root`: the job's folder."""
    inputs = {name: path.removeprefix("file://") for name, path in job.pop("inputs", {}).items()}
    root = str(model_trainer_root(tmp_path))
    result, log, seconds = sdk_job(sdk3_path, tmp_path, {"root": root, "inputs": inputs, **job}, timeout=timeout,
                                   driver="run_model_trainer.py")
    return {**result, "root": root}, log, seconds


def output_failure(result) -> str:
    """The failure file, in the output.tar.gz ModelTrainer's local mode packs, also for a job that failed."""
    with tarfile.open(os.path.join(result["root"], "compressed_artifacts", "output.tar.gz")) as archive:
        return archive.extractfile("failure").read().decode()


@pytest.mark.cores(2)
@pytest.mark.parametrize("line", ["2.21", "2.14"])
def test_the_built_in_model_on_two_hosts_with_auto(image, image_2_21, sdk3_path, sdk_inputs, tmp_path, line):
    """Algorithm mode: `ModelTrainer(training_image=..., hyperparameters=...)`, no source code.
    `auto` picks local SGD for two CPU hosts; its ranks talk over eth0."""
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGES[line], "instance_count": 2, "inputs": sdk_inputs,
        "hyperparameters": {"num_epochs": 1, "log_steps": 10}}, timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: local_sgd" in log and "world size 2" in log, log[-4000:]
    assert ETHWE_TO_ETH0 in log and "btl_tcp_if_include eth0" in log, log[-4000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


# (line, hosts, distribution): each mode of each line through ModelTrainer (local SGD above)
MODES = [("2.14", 1, "single"), ("2.14", 1, "tower"), ("2.14", 1, "mirrored"), ("2.14", 2, "horovod"),
         ("2.14", 2, "parameter_server"), ("2.14", 2, "multi_worker_mirrored"), ("2.21", 1, "single"),
         ("2.21", 1, "tower"), ("2.21", 1, "mirrored"), ("2.21", 2, "horovod"), ("2.21", 2, "parameter_server"),
         ("2.21", 2, "multi_worker_mirrored")]


@pytest.mark.cores(2)
@pytest.mark.parametrize("line, hosts, distribution", MODES, ids=[f"{m[2]} on {m[1]} host(s), {m[0]}" for m in MODES])
def test_the_built_in_model_in_each_mode(image, image_2_21, sdk3_path, sdk_inputs, tmp_path, line, hosts, distribution):
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGES[line], "instance_count": hosts, "inputs": sdk_inputs,
        "hyperparameters": {"num_epochs": 1, "log_steps": 10, "distribution": distribution}},
        timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert f"distribution: {distribution}" in log, log[-4000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    return write_mnist_arrays(tmp_path_factory.mktemp("mnist"))["data"]


@pytest.mark.cores(2)
def test_a_keras_3_script_with_multi_worker_mirrored_gets_its_tf_config_from_train(image_2_21, sdk3_path, mnist, tmp_path):
    """`SourceCode(..., command="train")` and the hyperparameter `distribution`: the script
    writes no TF_CONFIG of its own (it would only where none is given), `train` gives each
    host AWS's, and the CPU settings of its one process per host."""
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGE_2_21, "instance_count": 2, "inputs": {"training": mnist},
        "source_dir": os.path.join(SCRIPTS, "aws_style"), "entry_script": "mnist_keras3.py", "command": "train",
        "hyperparameters": {"epochs": 2, "strategy": "mwms", "distribution": "multi_worker_mirrored"}},
        timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "Running Basic Script driver" not in log and "Executing command: train" in log, log[-4000:]
    assert "distribution: multi_worker_mirrored" in log, log[-4000:]
    for index in range(2):  # AWS's TF_CONFIG: workers on port 8890, "cloud"
        assert (f'TF_CONFIG={{"cluster": {{"worker": ["algo-1:8890", "algo-2:8890"]}}, "environment": "cloud", '
                f'"task": {{"index": {index}, "type": "worker"}}}}') in log, log[-4000:]
    assert log.count("epoch 2: loss=") == 2 and "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(2)
def test_model_trainer_s_mpi_launches_its_ranks_on_every_host(image, sdk3_path, tmp_path):
    """`distributed=MPI(process_count_per_node=2)` on 2 hosts: 4 ranks, two on each host (the
    SDK's own MPI driver would start 2 in all, both on the first host)."""
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGE, "instance_count": 2, "mpi_processes_per_host": 2,
        "source_dir": os.path.join(SCRIPTS, "aws_style"), "entry_script": "hvd_ranks.py", "command": "train"},
        timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "Running MPI Driver" not in log and "--host algo-1:2,algo-2:2" in log, log[-4000:]
    with tarfile.open(result["model_data"][len("file://"):]) as archive:
        seen = {name for name in archive.getnames() if name.startswith("local-rank-")}
    assert seen == {"local-rank-0-rank-0", "local-rank-1-rank-1", "local-rank-0-rank-2", "local-rank-1-rank-3"}, seen


@pytest.mark.cores(2)
def test_a_horovod_tf_keras_script_under_model_trainer_s_own_mpi_driver_gets_keras_2(image_2_21, sdk3_path, sdk_inputs,
                                                                                     tmp_path):
    """`distributed=MPI(...)` without `command="train"` on the 2.21 image: ModelTrainer's own MPI
    driver runs the script (mpirun of `python -m mpi4py train.py`), and the image's start-up hook
    gives a script of horovod.tensorflow.keras tf.keras as Keras 2 (tf-keras), as `train` does:
    Horovod's optimizer wrapper is Keras 2's (under Keras 3 the script fails with "A KerasTensor
    cannot be used as input to a TensorFlow function")."""
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGE_2_21, "instance_count": 1, "mpi_processes_per_host": 2, "inputs": sdk_inputs,
        "source_dir": SCRIPTS, "entry_script": "hvd_train.py", "hyperparameters": {"epochs": 1}},
        timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "Running MPI Driver" in log and "KerasTensor" not in log, log[-4000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(1)
def test_a_failing_script_names_itself_its_rank_and_host_first(image, sdk3_path, sdk_inputs, tmp_path):
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGE, "instance_count": 1, "inputs": sdk_inputs,
        "source_dir": SCRIPTS, "entry_script": "keras_train.py", "command": "train",
        "hyperparameters": {"fail_with": "the data has no label column"}}, timeout=ONE_HOST_TIMEOUT_SEC)
    # Local mode does not tell a failed job (docker-compose ends 0): its host's exit code does.
    assert [e["exit_code"] for e in result["exits"]] == [1], (result["exits"], log[-4000:])
    first = output_failure(result).splitlines()[0]
    assert first.startswith("script keras_train.py (rank 0 on algo-1") and first.endswith(
        "exited with code 1: ValueError: the data has no label column"), first


@pytest.mark.cores(1)
@pytest.mark.parametrize("line", ["2.21", "2.14"])
def test_a_parquet_log_through_model_trainer(image, image_2_21, sdk3_path, tmp_path, line):
    """Click logs as they land, in the image: Parquet channels (raw Criteo columns), found by
    their files; the model it exports takes those columns (docs/your-data.md)."""
    from trainer.data import datagen

    data = datagen.generate(str(tmp_path / "logs"), 8_000, 2_000, files=2, data_format="parquet", workers=1)
    result, log, _ = model_trainer_job(sdk3_path, tmp_path, {
        "image": IMAGES[line], "instance_count": 1, "inputs": {"training": data["train"], "evaluation": data["eval"]},
        "hyperparameters": {"num_epochs": 1, "log_steps": 10}}, timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "input: channel(s) 'training', File mode, parquet" in log, log[-4000:]
    assert "input: column C26 (39) -> categorical field 38" in log, log[-4000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])

"""What AWS's own tests of its TensorFlow container check (sagemaker-tensorflow-training-
toolkit: test/integration/local and test/integration/sagemaker), checked here on the built
image through the SageMaker SDK's local mode, with scripts written in the same style
(tests/scripts/aws_style) and generated arrays of the shapes of their MNIST files:

- a Keras mnist script on one host and on two hosts, `my_model.h5` in model.tar.gz;
- Horovod on 2 hosts x 2 ranks: every rank's local rank, rank and size;
- multi-worker mirrored: the script sees its TF_CONFIG;
- parameter servers: the checkpoints a custom loop writes to model_dir, on an S3 API, and
  a second job that resumes from them;
- a tuning job's training job gets a model_dir of its own.

Every host must end with exit code 0 (the SDK's local mode stops the others when the
first one exits)."""
import json
import os
import tarfile

import pytest

from mnist_arrays import write_mnist_arrays
from s3_server import S3OnContainerNetwork
from sdk_jobs import (ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members,  # noqa: F401
                      sdk_job, sdk_path, user_scripts)

pytestmark = [pytest.mark.slow, pytest.mark.container]
SDK_NETWORK = "sagemaker-local"  # the network the SDK's local mode puts every job's hosts on


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    """file:// inputs of the two layouts AWS's tests use."""
    return {name: f"file://{folder}" for name, folder in write_mnist_arrays(tmp_path_factory.mktemp("mnist")).items()}


def aws_style(tmp_path, entry_point, distribution=None) -> dict:
    return user_scripts(tmp_path, entry_point, distribution, folder="aws_style")


def extracted(model_data, into) -> str:
    with tarfile.open(model_data[len("file://"):]) as archive:
        archive.extractall(into)
    return str(into)


# One host keeps about one core busy (measured: TRAINER_TEST_CPU_LOG); hosts training together in
# containers run alone: beside another job, a worker lost its peers once.
@pytest.mark.parametrize("hosts", [pytest.param(1, marks=pytest.mark.cores(1)),
                                   pytest.param(2, marks=pytest.mark.cores(2))])
def test_keras_mnist(sdk_path, mnist, tmp_path, hosts):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": hosts, "inputs": {"training": mnist["data"]},
                                                    "hyperparameters": {"epochs": 1},
                                                    "script": aws_style(tmp_path, "mnist_keras.py")},
                                timeout=ONE_HOST_TIMEOUT_SEC if hosts == 1 else TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "my_model.h5" in saved_model_members(result["model_data"])
    assert "entry point: script mnist_keras.py" in log and log.count("test accuracy=") == hosts


def test_horovod_two_hosts_two_ranks_each(sdk_path, mnist, tmp_path):
    """As AWS's test passes it: the SDK's MPI keys as hyperparameters."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "instance_count": 2, "inputs": {"training": mnist["data-distributed"]},
        "hyperparameters": {"sagemaker_mpi_enabled": True, "sagemaker_network_interface_name": "eth0",
                            "sagemaker_mpi_num_of_processes_per_host": 2},
        "script": aws_style(tmp_path, "hvd_ranks.py")}, timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: horovod" in log
    folder = extracted(result["model_data"], tmp_path / "model")
    for rank in range(4):
        with open(os.path.join(folder, f"local-rank-{rank % 2}-rank-{rank}")) as f:
            assert json.load(f) == {"local-rank": rank % 2, "rank": rank, "size": 4}


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_multi_worker_mirrored_sees_its_tf_config(sdk_path, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "instance_count": 2, "inputs": {}, "hyperparameters": {"sagemaker_multi_worker_mirrored_strategy_enabled": True},
        "script": aws_style(tmp_path, "mwms_config.py")}, timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: multi_worker_mirrored" in log and "TF_CONFIG=" in log
    folder = extracted(result["model_data"], tmp_path / "model")
    for index in (0, 1):
        with open(os.path.join(folder, f"tf-config-{index}.json")) as f:
            seen = json.load(f)
        assert seen["task"] == {"type": "worker", "index": index}
        assert len(seen["cluster"]["worker"]) == 2


@pytest.fixture
def s3_on_the_sdk_network(network_ready, tmp_path):
    """An S3 API the job's containers reach (on the SDK's network), stopped at the end."""
    import subprocess

    if subprocess.run([network_ready, "network", "exists", SDK_NETWORK]).returncode != 0:
        subprocess.run([network_ready, "network", "create", SDK_NETWORK], check=True, capture_output=True)
    s3 = S3OnContainerNetwork(network_ready, SDK_NETWORK, tmp_path / "moto.log")
    yield s3.server
    s3.stop()


@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
def test_parameter_servers_checkpoint_to_model_dir_on_s3(sdk_path, mnist, tmp_path, s3_on_the_sdk_network):
    """The master's custom loop saves checkpoints to the model_dir the SDK passes, here on an
    S3 API of the job's own, given to the SDK as users do (LocalSession's s3_endpoint_url)."""
    s3 = s3_on_the_sdk_network
    bucket = s3.bucket()
    script = {**aws_style(tmp_path, "ps_checkpoints.py", {"parameter_server": {"enabled": True}}),
              "model_dir": f"s3://{bucket}/mnist-ps/model"}
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "s3_endpoint": s3.endpoint,
                                                    "inputs": {"training": mnist["data-distributed"]},
                                                    "hyperparameters": {"epochs": 2}, "script": script},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: parameter_server" in log
    keys = s3.keys(bucket, "mnist-ps/model/")
    assert "mnist-ps/model/checkpoint" in keys and "mnist-ps/model/model.ckpt-20.index" in keys, keys


@pytest.mark.cores(1)
def test_a_script_resumes_from_its_checkpoints_on_s3(sdk_path, mnist, tmp_path, s3_on_the_sdk_network):
    """One host, twice with the same model_dir on S3: the second job starts from the first
    one's last checkpoint, and both end with exit code 0 (tensorflow-io 0.35.0 aborted a
    process that had used S3 when it exited)."""
    s3 = s3_on_the_sdk_network
    model_dir = f"s3://{s3.bucket()}/mnist/model"
    runs = []
    for attempt in ("first", "second"):
        job = {"instance_count": 1, "s3_endpoint": s3.endpoint, "inputs": {"training": mnist["data-distributed"]},
               "hyperparameters": {"epochs": 1},
               "script": {**aws_style(tmp_path / attempt, "ps_checkpoints.py"), "model_dir": model_dir}}
        runs.append(sdk_job(sdk_path, tmp_path / attempt, job, timeout=ONE_HOST_TIMEOUT_SEC))
        every_host_succeeded(*runs[-1][:2])
    assert f"saved {model_dir}/model.ckpt-10" in runs[0][1]
    assert f"resumed from {model_dir}/model.ckpt-10 at step 10" in runs[1][1]
    assert f"saved {model_dir}/model.ckpt-20" in runs[1][1]


@pytest.mark.cores(1)
def test_each_job_of_a_tuning_job_gets_its_own_model_dir(sdk_path, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "instance_count": 1, "inputs": {},
        "hyperparameters": {"_tuning_objective_metric": "accuracy", "arbitrary_value": 1},
        "script": {**aws_style(tmp_path, "tuning_model_dir.py"), "model_dir": "s3://bucket/tuning"}},
        timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "accuracy=1" in log and "model_dir=s3://bucket/tuning/" in log

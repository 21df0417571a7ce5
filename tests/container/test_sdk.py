"""The image driven by the SageMaker Python SDK in local mode, as users call it: as an
algorithm (Estimator with hyperparameters) and in script mode (TensorFlow estimator with
an entry point and `distribution=`), on one and on two hosts; and the repair of the SDK's
network when it was made without DNS."""
import os
import re
import subprocess
import uuid

import pytest

from bounds import within
from conftest import PROJECT_ROOT
from sdk_jobs import (HERE, ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members,
                      sdk_inputs, sdk_job, sdk_path, user_scripts)  # noqa: F401 (fixtures)
from trainer.report import METRIC_DEFINITIONS

pytestmark = [pytest.mark.slow, pytest.mark.container]


@pytest.mark.cores(1)
def test_preflight_repairs_a_network_without_dns(network_ready):
    """The SDK's network made without DNS (as an older setup left it) is found and removed, so
    that the next local-mode job makes it anew with DNS; the preflight then passes, in
    seconds. (On a network of this test's own name: the other jobs' stays untouched.)"""
    if network_ready != "podman":
        pytest.skip("the repair is of podman's networks; docker's user-defined networks always resolve names")
    network = f"sagemaker-local-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["podman", "network", "create", "--disable-dns", network], check=True, capture_output=True)
    try:
        done = subprocess.run(["./build.sh", "preflight"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "TRAINER_SDK_NETWORK": network})
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"the {network} network has no DNS: removing it" in done.stderr
        assert "containers on one podman network find each other by name" in done.stdout
        assert re.search(r"^preflight: engine: podman \d+\.\d+\.\d+ \(no docker daemon answers\); builds with buildah",
                         done.stdout, re.M), done.stdout
        assert subprocess.run(["podman", "network", "exists", network]).returncode != 0
    finally:
        subprocess.run(["podman", "network", "rm", "-f", network], capture_output=True)


@pytest.mark.cores(1)
def test_algorithm_one_host(sdk_path, sdk_inputs, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "log_steps": 10,
                                                                        "price_per_hour": 0.816}},
                                timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    members = saved_model_members(result["model_data"])
    assert "1/saved_model.pb" in members and any(m.startswith("1/variables/") for m in members)  # TF Serving
    for definition in METRIC_DEFINITIONS:  # what SageMaker's metric regexes pick up
        assert re.search(definition["Regex"], log), definition


def test_algorithm_horovod_on_two_hosts(sdk_path, sdk_inputs, tmp_path):
    """The built-in model with the SDK's MPI keys, 2 hosts x 2 ranks: mpirun reaches the
    second host over ssh with keys made for this job (the image holds none)."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs, "hyperparameters": {
        "num_epochs": 1, "sagemaker_mpi_enabled": True, "sagemaker_mpi_num_of_processes_per_host": 2}},
        timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "distribution: horovod" in log and "world size 4" in log
    assert "ssh: this job's keys made (a login key)" in log and "ssh: this job's keys made (a host key)" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(1)
def test_bad_hyperparameter_fails_fast_and_says_why(sdk_path, sdk_inputs, tmp_path):
    result, log, seconds = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                         "hyperparameters": {"batch_size": "large"}},
                                     timeout=ONE_HOST_TIMEOUT_SEC)
    assert "error" in result
    assert "hyperparameter 'batch_size': expected an integer, got 'large'" in log
    assert seconds < within(0), f"the failing job took {seconds:.0f} s"  # at once: the hyperparameters are read first


def script(distribution):
    return {"entry_point": "model.py", "source_dir": os.path.join(HERE, "sdk"), "distribution": distribution}


# MPI (2 x 2 ranks through the SageMaker training toolkit's MPI runner and sshd in every
# container): docs/your-model.md's hooks example (test_doc_examples.py::test_the_hooks_example).
@pytest.mark.cores(2)  # hosts training together in containers run alone: beside another job, a worker lost its peers once
@pytest.mark.parametrize("distribution, mode", [
    ({"parameter_server": {"enabled": True}}, "parameter_server"),
    ({"multi_worker_mirrored_strategy": {"enabled": True}}, "multi_worker_mirrored"),
], ids=["parameter_server", "multi_worker_mirrored"])
def test_script_mode_two_hosts(sdk_path, sdk_inputs, tmp_path, distribution, mode):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "adagrad_rate": 0.05},
                                                    "script": script(distribution)},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert f"distribution: {mode}" in log
    assert "user module model provides: model_fn, optimizer_fn" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(1)
def test_a_users_keras_script_on_one_host(sdk_path, sdk_inputs, tmp_path):
    """A script written for AWS's TensorFlow container, through the SDK's TensorFlow
    estimator; its requirements.txt names a wheel shipped beside it (no network)."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"epochs": 1, "import_module": "localdep"},
                                                    "script": user_scripts(tmp_path, "keras_train.py",
                                                                           with_wheel=True)},
                                timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "entry point: script keras_train.py" in log and "eval_auc=" in log
    assert "requirements.txt from the wheels beside the script: installed" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])

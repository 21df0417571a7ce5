"""The image driven by the SageMaker Python SDK in local mode, as users call it: as an
algorithm (Estimator with hyperparameters) and in script mode (TensorFlow estimator with
an entry point and `distribution=`), on one and on two hosts."""
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from conftest import IMAGE, PROJECT_ROOT
from trainer.report import METRIC_DEFINITIONS

pytestmark = [pytest.mark.slow, pytest.mark.container]
HERE = os.path.dirname(os.path.abspath(__file__))
JOB_TIMEOUT_SEC = 900  # a hang guard


@pytest.fixture(scope="session")
def sdk_path(image):
    done = subprocess.run(["./build.sh", "sdk-setup"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sdk_inputs(aws_split, tmp_path_factory):
    """file:// channels: the SDK copies folders."""
    folder = tmp_path_factory.mktemp("sdk-data")
    inputs = {}
    for name, path in aws_split.items():
        (folder / name).mkdir()
        shutil.copy(path, folder / name)
        inputs[name] = f"file://{folder / name}"
    return inputs


def sdk_job(sdk_path, tmp_path, job, timeout=JOB_TIMEOUT_SEC):
    python = os.path.join(sdk_path.split(os.pathsep)[-1], "python")
    env = {**os.environ, "PATH": sdk_path + os.pathsep + os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local"}
    job = {"image": IMAGE, "output": f"file://{tmp_path / 'output'}", **job}
    started = time.monotonic()
    done = subprocess.run([python, os.path.join(HERE, "sdk", "run_job.py"), json.dumps(job)], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=timeout)
    log = done.stdout + done.stderr
    results = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert results, log[-5000:]
    return json.loads(results[-1][len("RESULT "):]), log, time.monotonic() - started


def saved_model_members(model_data):
    with tarfile.open(model_data[len("file://"):]) as archive:
        return archive.getnames()


def test_algorithm_one_host(sdk_path, sdk_inputs, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "log_steps": 10,
                                                                        "price_per_hour": 0.816}})
    assert "model_data" in result, log[-5000:]
    members = saved_model_members(result["model_data"])
    assert "1/saved_model.pb" in members and any(m.startswith("1/variables/") for m in members)  # TF Serving
    for definition in METRIC_DEFINITIONS:  # what SageMaker's metric regexes pick up
        assert re.search(definition["Regex"], log), definition


def test_bad_hyperparameter_fails_fast_and_says_why(sdk_path, sdk_inputs, tmp_path):
    result, log, seconds = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                         "hyperparameters": {"batch_size": "large"}}, timeout=120)
    assert "error" in result
    assert "hyperparameter 'batch_size': expected an integer, got 'large'" in log
    assert seconds < 60, f"the failing job took {seconds:.0f} s"


def script(distribution):
    return {"entry_point": "model.py", "source_dir": os.path.join(HERE, "sdk"), "distribution": distribution}


@pytest.mark.parametrize("distribution, mode", [
    ({"parameter_server": {"enabled": True}}, "parameter_server"),
    # through the SageMaker training toolkit's MPI runner and sshd in every container
    ({"mpi": {"enabled": True, "processes_per_host": 2}}, "horovod"),
    ({"multi_worker_mirrored_strategy": {"enabled": True}}, "multi_worker_mirrored"),
], ids=["parameter_server", "mpi-2x2", "multi_worker_mirrored"])
def test_script_mode_two_hosts(sdk_path, sdk_inputs, tmp_path, distribution, mode):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "adagrad_rate": 0.05},
                                                    "script": script(distribution)})
    assert "model_data" in result, log[-6000:]
    assert f"distribution: {mode}" in log
    if mode == "horovod":
        # 4 ranks over 8,000 records: 2,000 each, 8 steps of 256 an epoch
        assert "world size 4" in log and "epoch=1 steps=8 " in log
    assert "user module model provides: model_fn, optimizer_fn" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])

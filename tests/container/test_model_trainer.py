"""The image under SageMaker's ModelTrainer (sagemaker.modules.train, the interface the SDK's
next major version keeps), in local-container mode: ModelTrainer runs its own driver as the
container's entry point (sm_train.sh, then `python3` on the script), not the image's
`train`. The script still gets the image's CPU defaults and a share of the host's threads
(trainer.image_environment), and trains."""
import json
import os
import tarfile

import pytest

from mnist_arrays import write_mnist_arrays
from sdk_jobs import (ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, model_trainer_root,  # noqa: F401
                      saved_model_members, sdk_job, sdk_path)
from conftest import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container]


@pytest.mark.cores(1)
def test_a_keras_script_through_model_trainer(sdk_path, tmp_path):
    data = write_mnist_arrays(tmp_path / "mnist")["data"]
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "source_dir": os.path.join(PROJECT_ROOT, "tests", "scripts", "aws_style"), "entry_script": "keras_cpu_seen.py",
        "hyperparameters": {"epochs": 1}, "inputs": {"training": data}, "root": str(model_trainer_root(tmp_path))},
        timeout=ONE_HOST_TIMEOUT_SEC, driver="run_model_trainer.py")
    every_host_succeeded(result, log)
    assert "Running Basic Script driver" in log  # ModelTrainer's own driver ran it, not train
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])
    with tarfile.open(result["model_data"][len("file://"):]) as archive:
        seen = json.load(archive.extractfile("cpu-settings.json"))
    assert seen["KMP_BLOCKTIME"] == "1"
    assert seen["KMP_AFFINITY"] == ("disabled" if seen["OMP_NUM_THREADS"] == "1" else "granularity=fine,compact,1,0")
    assert all(int(seen[name]) >= 1 for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                                                 "TF_NUM_INTEROP_THREADS")), seen


def test_model_trainer_s_mpi_driver_on_two_hosts(sdk_path, tmp_path):
    """ModelTrainer's MPI driver starts sshd on every host and logs in from each to the
    others with the key it finds: the image has none, so each host makes this job's keys and
    trusts the others' before that driver starts (docs/security.md). Over ssh the workers
    check the master, the master checks the workers and writes each its status file. (This
    SDK's driver gives mpirun `-np <processes per host>`, so its ranks all land on the first
    host; that is the SDK's, and the same in any image. Its worker looks for the master's
    status file every 30 s, and Docker's docker-compose stops the other hosts 10 s after the
    first one ends: there the worker may be killed while it waits, after the master wrote it
    the file; podman-compose lets it end.)"""
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "source_dir": os.path.join(PROJECT_ROOT, "tests", "scripts", "aws_style"), "entry_script": "hvd_ranks.py",
        "instance_count": 2, "mpi_processes_per_host": 2, "inputs": {}, "root": str(model_trainer_root(tmp_path))},
        timeout=TWO_HOST_TIMEOUT_SEC, driver="run_model_trainer.py")
    assert "model_data" in result, log[-6000:]
    exits = {e["container"].rsplit("_", 2)[-2]: e["exit_code"] for e in result["exits"]}
    assert exits["algo-1"] == 0 and (exits["algo-2"] == 0 or exits["algo-2"] == 137 and
                                     "Writing /tmp/done.algo-1 to algo-2" in log), (exits, log[-6000:])
    assert "Running MPI Driver" in log, log[-4000:]  # ModelTrainer's driver ran it, not train
    assert log.count("ssh: this job's hosts trust each other's keys for this job only") >= 2  # on both hosts
    for line in ("Worker can connect to master node algo-1.", "Master can connect to all worker nodes.",
                 "Finished writing status file", "-mca btl_tcp_if_include eth0"):  # eth0: the interface it has
        assert line in log, (line, log[-4000:])
    for rank in range(2):
        assert f"{{'local-rank': {rank}, 'rank': {rank}, 'size': 2}}" in log, log[-4000:]

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
from sdk_jobs import ONE_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members, sdk_job, sdk_path  # noqa: F401
from conftest import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container]


def test_a_keras_script_through_model_trainer(sdk_path, tmp_path):
    data = write_mnist_arrays(tmp_path / "mnist")["data"]
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "source_dir": os.path.join(PROJECT_ROOT, "tests", "scripts", "aws_style"), "entry_script": "keras_cpu_seen.py",
        "hyperparameters": {"epochs": 1}, "inputs": {"training": data}, "root": str(tmp_path / "job")},
        timeout=ONE_HOST_TIMEOUT_SEC, driver="run_model_trainer.py")
    every_host_succeeded(result, log)
    assert "Running Basic Script driver" in log  # ModelTrainer's own driver ran it, not train
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])
    with tarfile.open(result["model_data"][len("file://"):]) as archive:
        seen = json.load(archive.extractfile("cpu-settings.json"))
    assert seen["KMP_AFFINITY"] == "granularity=fine,compact,1,0" and seen["KMP_BLOCKTIME"] == "1"
    assert all(int(seen[name]) >= 1 for name in ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS",
                                                 "TF_NUM_INTEROP_THREADS")), seen

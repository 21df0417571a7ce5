"""The TensorFlow 2.21 line's image (`./build.sh image cpu 2.21`), through the SageMaker SDK's
local mode as users run it: what a script finds in it (Horovod built against its TensorFlow
included), a Keras 3 script of the kind written for AWS's 2.21 image training with
multi-worker mirrored on two hosts (its own TF_CONFIG and custom loop, `model.export`), a
Horovod script on two hosts, and the built-in DeepFM on one host.
Where the lines do not differ, the rest of the container tier runs on the 2.14 line's image."""
import json
import re
import subprocess
import uuid

import pytest

from conftest import IMAGE_2_21, remove_containers
from mnist_arrays import write_mnist_arrays
from sdk_jobs import ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC, every_host_succeeded, saved_model_members, sdk_job, sdk_inputs, user_scripts  # noqa: F401
from sdk_jobs import sdk_path as _sdk_path  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]


@pytest.fixture(scope="module")
def sdk_path(image_2_21, _sdk_path):
    return _sdk_path


@pytest.mark.cores(1)
def test_what_a_script_finds_in_the_2_21_image(image_2_21):
    check = ("import importlib.util, keras, mpi4py, tensorflow as tf, tensorflow_io, tf_keras, sagemaker_tensorflow, "
             "pandas, sklearn, cv2, tensorflow_datasets, sagemaker, sagemaker_tensorflow_container; "
             "print(tf.__version__, keras.__version__, tf_keras.__version__, tf.keras.__name__.split('.')[0]); "
             "import horovod.tensorflow as hvd; hvd.init(); print(hvd.size(), hvd.mpi_built(), hvd.gloo_built()); "
             "import horovod.tensorflow.keras")
    name = f"trainer-test-{uuid.uuid4().hex[:8]}"
    try:
        done = subprocess.run([image_2_21, "run", "--rm", "--name", name, "--network", "none", "--entrypoint", "bash",
                               IMAGE_2_21, "-c", f"/opt/venv/bin/python -c \"{check}\" && python3 -m pip check && command -v train"],
                              capture_output=True, text=True, timeout=300)
    finally:
        remove_containers(image_2_21, name)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    versions, horovod, pip_check, train = done.stdout.strip().splitlines()[-4:]
    assert versions == "2.21.0 3.15.1 2.21.0 keras"  # a script's tf.keras is Keras 3
    assert horovod == "1 True True" and "No broken requirements" in pip_check and train.endswith("/train")


@pytest.fixture(scope="module")
def mnist(tmp_path_factory):
    return f"file://{write_mnist_arrays(tmp_path_factory.mktemp('mnist'))['data']}"


@pytest.mark.cores(2)
def test_a_keras_3_script_with_multi_worker_mirrored_on_two_hosts(sdk_path, mnist, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "image": IMAGE_2_21, "instance_count": 2, "inputs": {"training": mnist},
        "hyperparameters": {"epochs": 2, "strategy": "mwms"},
        "script": user_scripts(tmp_path, "mnist_keras3.py", folder="aws_style")}, timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert log.count("keras 3.15.1 tensorflow 2.21.0 on algo-") == 2 and log.count("epoch 2: loss=") == 2
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(2)
def test_a_horovod_script_on_two_hosts(sdk_path, sdk_inputs, tmp_path):
    """A horovod.tensorflow.keras script, unchanged, with the SDK's MPI key on two hosts: a rank
    on each, tf.keras given to it as Keras 2 (tf-keras), equal weights on both ranks."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {
        "image": IMAGE_2_21, "instance_count": 2, "inputs": sdk_inputs, "hyperparameters": {"epochs": 1},
        "script": user_scripts(tmp_path, "hvd_train.py", distribution={"mpi": {"enabled": True, "processes_per_host": 1}})},
        timeout=TWO_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "horovod (sagemaker_mpi_enabled: Horovod over MPI)" in log and "the script's tf.keras is tf-keras" in log
    weights = re.findall(r"WEIGHTS rank(\d) (.*)", log)
    assert sorted(rank for rank, _ in weights) == ["0", "1"], log[-4000:]
    first, second = (json.JSONDecoder().raw_decode(printed)[0] for _, printed in weights)
    assert first == pytest.approx(second, rel=1e-6)
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.cores(1)
def test_the_built_in_model_on_one_host(sdk_path, sdk_inputs, tmp_path):
    """Its parameter servers on two hosts and its AUC against the 2.14 line's: the 2.21 line's tier."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {"image": IMAGE_2_21, "instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "log_steps": 10}},
                             timeout=ONE_HOST_TIMEOUT_SEC)
    every_host_succeeded(result, log)
    assert "TensorFlow 2.21 line: TensorFlow 2.21.0" in log, log[-3000:]
    assert "single (1 CPU host, the built-in DeepFM, TensorFlow 2.21" in log, log[-3000:]
    assert float(log.split("eval_auc=")[-1].split()[0]) > 0.7, log[-3000:]
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])

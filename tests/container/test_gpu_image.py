"""The GPU image, built from nothing with `./build.sh image gpu` (a long build: CUDA's
compiler and wheels, Horovod compiled with NCCL), outside the default run: select it with
`./build.sh test -m gpu_image`. No GPU here: its TensorFlow says CUDA is built in, Horovod's
build lists NCCL, and `train` runs the built-in model with 2 Horovod processes on CPUs."""
import os
import subprocess
import uuid

import pytest

from conftest import IMAGE, PROJECT_ROOT, remove_containers
from test_image import metrics_of, run_in_container
from trainer.local.runner import LocalJob

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.gpu_image]
GPU_IMAGE = IMAGE.replace(":cpu", ":gpu")
BUILD_TIMEOUT_SEC = 3 * 3600  # a hang guard for the build, not a speed claim


@pytest.fixture(scope="module")
def gpu_image(network_ready):
    done = subprocess.run(["./build.sh", "image", "gpu"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_SEC)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return network_ready


def in_image(engine, *command):
    name = f"trainer-test-{uuid.uuid4().hex[:8]}"
    try:
        return subprocess.run([engine, "run", "--rm", "--name", name, "--network", "none", "--entrypoint", command[0],
                               GPU_IMAGE, *command[1:]], capture_output=True, text=True, timeout=300)
    finally:
        remove_containers(engine, name)


def test_its_tensorflow_has_cuda_and_horovod_has_nccl(gpu_image):
    tensorflow = in_image(gpu_image, "python3", "-c",
                          "import tensorflow as tf; print(tf.test.is_built_with_cuda(), tf.sysconfig.get_build_info()['cuda_version'])")
    assert tensorflow.returncode == 0 and tensorflow.stdout.split()[-2:] == ["True", "11.8"], tensorflow.stderr[-2000:]
    horovod = in_image(gpu_image, "horovodrun", "--check-build")
    assert horovod.returncode == 0 and "[X] NCCL" in horovod.stdout and "[X] TensorFlow" in horovod.stdout, horovod.stdout


def test_train_runs_the_built_in_model_with_horovod_on_cpus(gpu_image, aws_split, tmp_path):
    job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                   {"distribution": "horovod", "processes_per_host": "2", "num_epochs": "2"})
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    done = run_in_container(gpu_image, folder, [os.path.dirname(aws_split["training"])], image=GPU_IMAGE)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    metrics = metrics_of(folder)
    assert metrics["distribution"] == "horovod" and metrics["world_size"] == 2 and metrics["eval_auc"] > 0.65
    assert os.path.exists(os.path.join(folder, "model", "1", "saved_model.pb"))

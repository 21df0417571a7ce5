"""The GPU images, built from nothing with `./build.sh image gpu` and `./build.sh image gpu
2.21` (long builds: CUDA's wheels; on the 2.14 line its compiler and Horovod compiled with
NCCL; on the 2.21 line Horovod compiled with CPU collectives), outside the default run:
select them with `./build.sh test -m gpu_image`. No GPU here: their TensorFlow says CUDA is
built in (11.8 on 2.14, 12 on 2.21), Horovod's build lists NCCL on 2.14 (and not on 2.21),
and `train` runs the built-in model with 2 Horovod processes on CPUs."""
import os
import subprocess
import uuid

import pytest

from conftest import IMAGE, PROJECT_ROOT, remove_containers
from test_image import metrics_of, run_in_container
from trainer.local.runner import LocalJob

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.gpu_image]
GPU_IMAGE = IMAGE.replace(":cpu", ":gpu")
GPU_IMAGE_2_21 = IMAGE.replace(":cpu", ":2.21-gpu")
BUILD_TIMEOUT_SEC = 3 * 3600  # a hang guard for the build, not a speed claim


@pytest.fixture(scope="module")
def gpu_image(network_ready):
    done = subprocess.run(["./build.sh", "image", "gpu"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_SEC)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return network_ready


@pytest.fixture(scope="module")
def gpu_image_2_21(network_ready):
    done = subprocess.run(["./build.sh", "image", "gpu", "2.21"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=BUILD_TIMEOUT_SEC)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return network_ready


def in_image(engine, *command, image=GPU_IMAGE):
    name = f"trainer-test-{uuid.uuid4().hex[:8]}"
    try:
        return subprocess.run([engine, "run", "--rm", "--name", name, "--network", "none", "--entrypoint", command[0],
                               image, *command[1:]], capture_output=True, text=True, timeout=300)
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


def test_the_2_21_gpu_image_has_tensorflow_s_cuda_build_and_no_second_tensorflow(gpu_image_2_21):
    seen = in_image(gpu_image_2_21, "python3", "-c",
                    "import tensorflow as tf, keras; from importlib import metadata as m; "
                    "print(tf.test.is_built_with_cuda(), tf.sysconfig.get_build_info()['cuda_version'], keras.__version__, "
                    "[d.metadata['Name'] for d in m.distributions() if d.metadata['Name'] in ('tensorflow-cpu', 'tensorflow_cpu')])",
                    image=GPU_IMAGE_2_21)
    assert seen.returncode == 0, seen.stderr[-2000:]
    built_with_cuda, cuda, keras, cpu_builds = seen.stdout.split(maxsplit=3)
    assert built_with_cuda == "True" and cuda.startswith("12") and keras == "3.15.1" and cpu_builds.strip() == "[]", seen.stdout


def test_the_2_21_gpu_image_s_horovod_has_tensorflow_mpi_and_gloo_without_nccl(gpu_image_2_21):
    horovod = in_image(gpu_image_2_21, "horovodrun", "--check-build", image=GPU_IMAGE_2_21)
    assert horovod.returncode == 0, horovod.stdout + horovod.stderr[-2000:]
    for built in ("[X] TensorFlow", "[X] MPI", "[X] Gloo", "[ ] NCCL"):
        assert built in horovod.stdout, horovod.stdout


def test_train_runs_the_built_in_model_on_the_2_21_gpu_image_with_horovod_on_cpus(gpu_image_2_21, aws_split,
                                                                                   tmp_path):
    job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                   {"distribution": "horovod", "processes_per_host": "2", "num_epochs": "2"})
    folder = job.lay_out(str(tmp_path / "job"))["algo-1"]
    done = run_in_container(gpu_image_2_21, folder, [os.path.dirname(aws_split["training"])], image=GPU_IMAGE_2_21)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    metrics = metrics_of(folder)
    assert metrics["distribution"] == "horovod" and metrics["world_size"] == 2 and metrics["eval_auc"] > 0.65
    assert os.path.exists(os.path.join(folder, "model", "1", "saved_model.pb"))

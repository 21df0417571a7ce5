"""Security of the image: MPI's ssh between containers uses keys made when the image was
built, with password login off; the repository holds no key. (Hyperparameters are parsed
as data: tests/unit/test_hyperparameters.py; the image trains with no network at all:
tests/container/test_image.py runs every job with --network none.)"""
import subprocess

import pytest

from conftest import IMAGE, PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container]


def in_image(engine, *command) -> str:
    done = subprocess.run([engine, "run", "--rm", "--network", "none", IMAGE, *command],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return done.stdout


def test_sshd_takes_keys_only(image):
    engine = image  # the fixture builds the image and names the engine
    settings = dict(line.split(" ", 1) for line in in_image(engine, "sshd", "-T").splitlines() if " " in line)
    assert settings["passwordauthentication"] == "no"
    assert settings["permitrootlogin"] in ("prohibit-password", "without-password")
    assert settings["pubkeyauthentication"] == "yes"


def test_the_image_keys_were_made_at_build_and_are_not_in_the_repository(image):
    engine = image
    public_key = in_image(engine, "cat", "/root/.ssh/id_ed25519.pub").split()[1]
    authorized = in_image(engine, "cat", "/root/.ssh/authorized_keys")
    assert public_key in authorized
    private_key_header = "-----BEGIN " + "OPENSSH PRIVATE KEY"  # split: this file must not match itself
    tracked = subprocess.run(["git", "grep", "-l", "-I", "-F", "-e", public_key, "-e", private_key_header],
                             cwd=PROJECT_ROOT, capture_output=True, text=True)
    assert tracked.stdout.strip() == "", tracked.stdout  # no key, public or private, is in the sources

"""`build.sh push`: the ECR commands in a dry run, and a real push to a local registry."""
import json
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import PROJECT_ROOT

pytestmark = [pytest.mark.slow, pytest.mark.container]


def push(*args, timeout=900):
    return subprocess.run(["./build.sh", "push", *args], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=timeout)


@pytest.mark.cores(0)
@pytest.mark.parametrize("args, region, tags", [
    (("--dry-run", "--account", "123456789012", "--region", "us-east-1"), "us-east-1", ("2.14-cpu", "cpu")),
    (("--dry-run", "--account", "123456789012", "--region", "eu-west-1", "--tag", "1.0"), "eu-west-1", ("1.0",)),
    (("--dry-run", "--flavour", "2.21-cpu", "--account", "123456789012", "--region", "us-east-1"), "us-east-1",
     ("2.21-cpu",)),  # docs/image.md's, the 2.21 line
])
def test_dry_run_prints_the_ecr_commands(args, region, tags):
    """As `build.sh push` runs them, its engine set up (push.sh's own tags: tests/unit/test_doc_tags.py)."""
    source = args[args.index("--flavour") + 1] if "--flavour" in args else "cpu"
    done = push(*args)
    assert done.returncode == 0, done.stderr
    registry = f"123456789012.dkr.ecr.{region}.amazonaws.com"
    lines = done.stdout.strip().splitlines()[-2 - 2 * len(tags):]
    assert lines[0].startswith(f"aws ecr describe-repositories --repository-names sagemaker-tf-trainer --region {region} "
                               "|| aws ecr create-repository")
    assert lines[1].endswith(f"login --username AWS --password-stdin {registry}")
    for index, tag in enumerate(tags):
        assert lines[2 + 2 * index].endswith(f"tag localhost/sagemaker-tf-trainer:{source} "
                                             f"{registry}/sagemaker-tf-trainer:{tag}")
        assert lines[3 + 2 * index].endswith(f"push {registry}/sagemaker-tf-trainer:{tag}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def local_registry(tmp_path):
    port = free_port()
    config = tmp_path / "registry.yml"
    config.write_text(f"version: 0.1\nstorage:\n  filesystem:\n    rootdirectory: {tmp_path / 'store'}\n"
                      f"http:\n  addr: 127.0.0.1:{port}\nlog:\n  level: warn\n")
    server = subprocess.Popen(["docker-registry", "serve", str(config)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v2/", timeout=2)
            break
        except OSError:
            assert time.monotonic() < deadline, "the local registry did not start"
            time.sleep(0.2)
    yield f"127.0.0.1:{port}"
    server.terminate()
    server.wait(timeout=10)


@pytest.mark.cores(1)
def test_push_to_a_local_registry(image, local_registry):
    try:
        done = push("--registry", local_registry, "--insecure", "--repository", "trainer-test", "--tag", "t1")
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        tags = json.load(urllib.request.urlopen(f"http://{local_registry}/v2/trainer-test/tags/list", timeout=10))
        assert tags == {"name": "trainer-test", "tags": ["t1"]}
    finally:
        subprocess.run([image, "rmi", f"{local_registry}/trainer-test:t1"], capture_output=True)  # the tag only

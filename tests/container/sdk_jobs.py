"""Jobs through the SageMaker Python SDK in local mode, as users run them (the SDK in its own
environment, `./build.sh sdk-setup [2|3]`; `sdk/run_job.py` drives SDK 2.x's estimators,
`sdk/run_model_trainer.py` either SDK's ModelTrainer), for the container tests:
run one, read how every host ended, and bring it down whatever happens. A test module
imports the fixtures it uses from here (sdk_path, sdk_inputs)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tarfile
import time
import uuid

import pytest

from conftest import IMAGE, PROJECT_ROOT
from sdk.compose import containers_of

HERE = os.path.dirname(os.path.abspath(__file__))
# Hang guards, not speed claims: a one-host job ends in about a minute, a two-host one in two.
ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC = 180, 300


@pytest.fixture(scope="session")
def sdk_path(network_ready):
    done = subprocess.run(["./build.sh", "sdk-setup"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sdk3_path(network_ready):
    """The SDK's current major version, 3.x (ModelTrainer): `./build.sh sdk-setup 3`."""
    done = subprocess.run(["./build.sh", "sdk-setup", "3"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def sdk_inputs(aws_split, tmp_path_factory):
    """file:// channels: the SDK copies folders."""
    folder = tmp_path_factory.mktemp("sdk-data")
    inputs = {}
    for name, path in aws_split.items():
        (folder / name).mkdir()
        shutil.copy(path, folder / name)
        inputs[name] = f"file://{folder / name}"
    return inputs


def sdk_job(sdk_path, tmp_path, job, timeout, driver: str = "run_job.py"):
    """Run the job through the SDK; whatever happens (a failure, the hang guard), its
    containers and network are brought down before this returns."""
    python = os.path.join(sdk_path.split(os.pathsep)[-1], "python")
    record = tmp_path / "compose-files"
    env = {**os.environ, "PATH": sdk_path + os.pathsep + os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "TRAINER_COMPOSE_RECORD": str(record)}
    job = {"image": IMAGE, "output": f"file://{tmp_path / 'output'}", **job}
    started = time.monotonic()
    sdk = subprocess.Popen([python, os.path.join(HERE, "sdk", driver), json.dumps(job)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = sdk.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(sdk.pid, signal.SIGKILL)  # the SDK, the compose command and its engine clients
        stdout, stderr = sdk.communicate()
        (tmp_path / "sdk-job.log").write_text(stdout + stderr)
        pytest.fail(f"the job did not end within {timeout} s; its whole log: {tmp_path / 'sdk-job.log'}; it ends:\n"
                    f"{(stdout + stderr)[-5000:]}")
    finally:  # also when the test itself is interrupted
        if sdk.poll() is None:
            os.killpg(sdk.pid, signal.SIGKILL)
        bring_down(sdk_path, record)
    log = stdout + stderr
    (tmp_path / "sdk-job.log").write_text(log)  # kept with the test's folder, for a look afterwards
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert results, log[-5000:]
    result = json.loads(results[-1][len("RESULT "):])
    exits = tmp_path / "compose-files.exits"  # every host's exit code, in the order they ended (sdk/compose.py)
    result["exits"] = [json.loads(line) for line in exits.read_text().splitlines()] if exits.exists() else []
    return result, log, time.monotonic() - started


def model_trainer_root(tmp_path):
    """A folder for ModelTrainer's local mode to keep a job in. Its docker-compose project is
    named after the folder: a name of its own, or two jobs running side by side would share
    containers (and one's start would stop the other's)."""
    return tmp_path / f"job-{uuid.uuid4().hex[:8]}"


def every_host_succeeded(result, log) -> None:
    """The job succeeded and no host was stopped into a failure when the first one ended."""
    assert "model_data" in result, log[-6000:]
    assert result["exits"] and all(e["exit_code"] == 0 for e in result["exits"]), (result["exits"], log[-6000:])


def bring_down(sdk_path, record) -> None:
    """Remove the containers and networks of every compose file the job used."""
    if not record.exists():
        return
    compose = os.path.join(sdk_path.split(os.pathsep)[0], "docker-compose")  # sdk/compose.py, for either engine
    for compose_file in set(record.read_text().split()):
        subprocess.run([compose, "-f", compose_file, "down", "-t", "0"], capture_output=True, timeout=120)
        left = containers_of(compose_file)
        assert not left, f"containers of {compose_file} are still there: {left}"


def saved_model_members(model_data):
    with tarfile.open(model_data[len("file://"):]) as archive:
        return archive.getnames()


def user_scripts(tmp_path, entry_point: str, distribution=None, with_wheel: bool = False, folder: str = "") -> dict:
    """The SDK's `entry_point` and `source_dir` for one of tests/scripts (or of its `folder`);
    `with_wheel`: the source dir also ships a wheel that its requirements.txt names
    (installed offline)."""
    source = tmp_path / "source"
    shutil.copytree(os.path.join(PROJECT_ROOT, "tests", "scripts", folder), source)
    if with_wheel:
        write_wheel(source / "localdep-1.0-py3-none-any.whl", "localdep", "VALUE = 42\n")
        (source / "requirements.txt").write_text("localdep==1.0\n")
    return {"entry_point": entry_point, "source_dir": str(source), "distribution": distribution}


def write_wheel(path, name: str, module_source: str, version: str = "1.0", requires: tuple = ()) -> None:
    """A minimal pure-Python wheel of one module (what `pip wheel` makes of it), needing
    `requires` (Requires-Dist lines)."""
    import base64
    import hashlib
    import zipfile

    info = f"{name}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {requirement}\n" for requirement in requires)
    files = {f"{name}.py": module_source,
             f"{info}/METADATA": metadata,
             f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(text.encode())}")
            wheel.writestr(member, text)
        record.append(f"{info}/RECORD,,")
        wheel.writestr(f"{info}/RECORD", "\n".join(record) + "\n")

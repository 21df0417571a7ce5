"""The image driven by the SageMaker Python SDK in local mode, as users call it: as an
algorithm (Estimator with hyperparameters) and in script mode (TensorFlow estimator with
an entry point and `distribution=`), on one and on two hosts; and the repair of the SDK's
network when it was made without DNS."""
import json
import os
import re
import shutil
import signal
import subprocess
import tarfile
import time
import uuid

import pytest

from conftest import IMAGE, PROJECT_ROOT
from trainer.report import METRIC_DEFINITIONS

pytestmark = [pytest.mark.slow, pytest.mark.container]
HERE = os.path.dirname(os.path.abspath(__file__))
# Hang guards, not speed claims: a one-host job ends in about a minute, a two-host one in two.
ONE_HOST_TIMEOUT_SEC, TWO_HOST_TIMEOUT_SEC = 180, 300


@pytest.fixture(scope="session")
def sdk_path(network_ready):
    done = subprocess.run(["./build.sh", "sdk-setup"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=1800)
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


def sdk_job(sdk_path, tmp_path, job, timeout):
    """Run the job through the SDK; whatever happens (a failure, the hang guard), its
    containers and network are brought down before this returns."""
    python = os.path.join(sdk_path.split(os.pathsep)[-1], "python")
    record = tmp_path / "compose-files"
    env = {**os.environ, "PATH": sdk_path + os.pathsep + os.environ["PATH"], "AWS_DEFAULT_REGION": "us-east-1",
           "AWS_ACCESS_KEY_ID": "local", "AWS_SECRET_ACCESS_KEY": "local", "TRAINER_COMPOSE_RECORD": str(record)}
    job = {"image": IMAGE, "output": f"file://{tmp_path / 'output'}", **job}
    started = time.monotonic()
    sdk = subprocess.Popen([python, os.path.join(HERE, "sdk", "run_job.py"), json.dumps(job)], cwd=tmp_path, env=env,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stdout, stderr = sdk.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(sdk.pid, signal.SIGKILL)  # the SDK, podman-compose and its podman clients
        stdout, stderr = sdk.communicate()
        pytest.fail(f"the job did not end within {timeout} s; its log ends:\n{(stdout + stderr)[-5000:]}")
    finally:  # also when the test itself is interrupted
        if sdk.poll() is None:
            os.killpg(sdk.pid, signal.SIGKILL)
        bring_down(sdk_path, record)
    log = stdout + stderr
    (tmp_path / "sdk-job.log").write_text(log)  # kept with the test's folder, for a look afterwards
    results = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    assert results, log[-5000:]
    return json.loads(results[-1][len("RESULT "):]), log, time.monotonic() - started


def bring_down(sdk_path, record) -> None:
    """Remove the containers and networks of every compose file the job used."""
    if not record.exists():
        return
    podman_compose = os.path.join(sdk_path.split(os.pathsep)[-1], "podman-compose")
    for compose_file in set(record.read_text().split()):
        subprocess.run([podman_compose, "-f", compose_file, "down", "-t", "0"], capture_output=True, timeout=120)
        names = re.findall(r"container_name: (\S+)", open(compose_file).read()) if os.path.exists(compose_file) else []
        left = subprocess.run(["podman", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True).stdout
        assert not set(names) & set(left.split()), f"containers of {compose_file} are still there"


def saved_model_members(model_data):
    with tarfile.open(model_data[len("file://"):]) as archive:
        return archive.getnames()


def test_preflight_repairs_a_network_without_dns(network_ready):
    """The SDK's network made without DNS (as an older setup left it) is found and removed, so
    that the next local-mode job makes it anew with DNS; the preflight then passes, in
    seconds. (On a network of this test's own name: the other jobs' stays untouched.)"""
    if network_ready != "podman":
        pytest.skip("the repair is of podman's networks; docker's user-defined networks always resolve names")
    network = f"sagemaker-local-test-{uuid.uuid4().hex[:8]}"
    subprocess.run(["podman", "network", "create", "--disable-dns", network], check=True, capture_output=True)
    try:
        done = subprocess.run(["./build.sh", "preflight"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                              timeout=120, env={**os.environ, "TRAINER_SDK_NETWORK": network})
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"the {network} network has no DNS: removing it" in done.stderr
        assert "containers on one podman network find each other by name" in done.stdout
        assert subprocess.run(["podman", "network", "exists", network]).returncode != 0
    finally:
        subprocess.run(["podman", "network", "rm", "-f", network], capture_output=True)


def test_algorithm_one_host(sdk_path, sdk_inputs, tmp_path):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "log_steps": 10,
                                                                        "price_per_hour": 0.816}},
                                timeout=ONE_HOST_TIMEOUT_SEC)
    assert "model_data" in result, log[-5000:]
    members = saved_model_members(result["model_data"])
    assert "1/saved_model.pb" in members and any(m.startswith("1/variables/") for m in members)  # TF Serving
    for definition in METRIC_DEFINITIONS:  # what SageMaker's metric regexes pick up
        assert re.search(definition["Regex"], log), definition


def test_bad_hyperparameter_fails_fast_and_says_why(sdk_path, sdk_inputs, tmp_path):
    result, log, seconds = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                         "hyperparameters": {"batch_size": "large"}},
                                     timeout=ONE_HOST_TIMEOUT_SEC)
    assert "error" in result
    assert "hyperparameter 'batch_size': expected an integer, got 'large'" in log
    assert seconds < 60, f"the failing job took {seconds:.0f} s"


def script(distribution):
    return {"entry_point": "model.py", "source_dir": os.path.join(HERE, "sdk"), "distribution": distribution}


@pytest.mark.parametrize("distribution, mode", [
    ({"parameter_server": {"enabled": True}}, "parameter_server"),
    # through the SageMaker training toolkit's MPI runner and sshd in every container
    ({"mpi": {"enabled": True, "processes_per_host": 2}}, "horovod"),
    ({"multi_worker_mirrored_strategy": {"enabled": True}}, "multi_worker_mirrored"),
], ids=["parameter_server", "mpi-2x2", "multi_worker_mirrored"])
def test_script_mode_two_hosts(sdk_path, sdk_inputs, tmp_path, distribution, mode):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"num_epochs": 2, "adagrad_rate": 0.05},
                                                    "script": script(distribution)},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    assert "model_data" in result, log[-6000:]
    assert f"distribution: {mode}" in log
    if mode == "horovod":
        # 4 ranks over 8,000 records: 2,000 each, 8 steps of 256 an epoch
        assert "world size 4" in log and "epoch=1 steps=8 " in log
    assert "user module model provides: model_fn, optimizer_fn" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


def user_scripts(tmp_path, entry_point: str, distribution=None, with_wheel: bool = False) -> dict:
    """The SDK's `entry_point` and `source_dir` for one of tests/scripts; `with_wheel`: the
    source dir also ships a wheel that its requirements.txt names (installed offline)."""
    source = tmp_path / "source"
    shutil.copytree(os.path.join(PROJECT_ROOT, "tests", "scripts"), source)
    if with_wheel:
        write_wheel(source / "localdep-1.0-py3-none-any.whl", "localdep", "VALUE = 42\n")
        (source / "requirements.txt").write_text("localdep==1.0\n")
    return {"entry_point": entry_point, "source_dir": str(source), "distribution": distribution}


def write_wheel(path, name: str, module_source: str) -> None:
    """A minimal pure-Python wheel of one module (what `pip wheel` makes of it)."""
    import base64
    import hashlib
    import zipfile

    files = {f"{name}.py": module_source,
             f"{name}-1.0.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
             f"{name}-1.0.dist-info/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = []
    with zipfile.ZipFile(path, "w") as wheel:
        for member, text in files.items():
            digest = base64.urlsafe_b64encode(hashlib.sha256(text.encode()).digest()).rstrip(b"=").decode()
            record.append(f"{member},sha256={digest},{len(text.encode())}")
            wheel.writestr(member, text)
        record.append(f"{name}-1.0.dist-info/RECORD,,")
        wheel.writestr(f"{name}-1.0.dist-info/RECORD", "\n".join(record) + "\n")


def test_a_users_keras_script_on_one_host(sdk_path, sdk_inputs, tmp_path):
    """A script written for AWS's TensorFlow container, through the SDK's TensorFlow
    estimator; its requirements.txt names a wheel shipped beside it (no network)."""
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 1, "inputs": sdk_inputs,
                                                    "hyperparameters": {"epochs": 1, "import_module": "localdep"},
                                                    "script": user_scripts(tmp_path, "keras_train.py",
                                                                           with_wheel=True)},
                                timeout=ONE_HOST_TIMEOUT_SEC)
    assert "model_data" in result, log[-6000:]
    assert "entry point: script keras_train.py" in log and "eval_auc=" in log
    assert "requirements.txt from the wheels beside the script: installed" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])


@pytest.mark.parametrize("entry_point, distribution, mode", [
    ("hvd_train.py", {"mpi": {"enabled": True, "processes_per_host": 2}}, "horovod"),
    ("ps_train.py", {"parameter_server": {"enabled": True}}, "parameter_server"),
    ("mwms_train.py", {"multi_worker_mirrored_strategy": {"enabled": True}}, "multi_worker_mirrored"),
], ids=["mpi-2x2", "parameter_server", "multi_worker_mirrored"])
def test_a_users_script_on_two_hosts(sdk_path, sdk_inputs, tmp_path, entry_point, distribution, mode):
    result, log, _ = sdk_job(sdk_path, tmp_path, {"instance_count": 2, "inputs": sdk_inputs,
                                                    "hyperparameters": {"epochs": 1},
                                                    "script": user_scripts(tmp_path, entry_point, distribution)},
                                timeout=TWO_HOST_TIMEOUT_SEC)
    assert "model_data" in result, log[-6000:]
    assert f"entry point: script {entry_point}" in log and f"distribution: {mode}" in log
    assert "1/saved_model.pb" in saved_model_members(result["model_data"])

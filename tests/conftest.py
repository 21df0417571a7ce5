"""Shared test helpers: the project's paths, the shared real datasets, job runs."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

import cores
from cores import pytest_configure, pytest_runtest_protocol, pytest_unconfigure  # noqa: F401 (hooks)
from gate import pytest_collection_modifyitems  # noqa: F401 (hook)
from trainer.tf_line import LEGACY_KERAS_ENV, installed

# The tests build the container's own model in their own processes too: with the Keras it
# runs on this line (tf-keras on 2.21). Jobs they start inherit it; a test of a Keras 3
# script hands its job an environment without it (without_own_keras).
installed().use_own_keras()


def without_own_keras(environ=None) -> dict:
    """An environment for a job whose script must get the Keras a user's would."""
    environ = dict(os.environ if environ is None else environ)
    environ.pop(LEGACY_KERAS_ENV, None)
    return environ

PROJECT_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED_DATA = os.path.join(os.path.dirname(PROJECT_ROOT), "shared", "data")
AWS_DEEPFM = os.path.join(SHARED_DATA, "aws-deepfm", "val.tfrecords")
CRITEO_SAMPLE = os.path.join(SHARED_DATA, "criteo-sample", "criteo_sample.txt")
JOB_TIMEOUT_SEC = 600  # a guard against hangs, not a performance bound


def shared_file(path: str) -> str:
    if not os.path.exists(path):
        pytest.skip(f"{path} is not here: the shared datasets live in ../shared/data beside the project")
    return path


@pytest.fixture(scope="session")
def aws_split(tmp_path_factory):
    """The DeepFM sample's 10,000 records: the first 8,000 for training, the last 2,000
    for evaluation, in file order (`trainer split`)."""
    from trainer.data.split import split

    source = shared_file(AWS_DEEPFM)
    folder = tmp_path_factory.mktemp("aws-deepfm")
    train, evaluation = str(folder / "train.tfrecords"), str(folder / "eval.tfrecords")
    assert split(source, [8000, 2000], [train, evaluation]) == [8000, 2000]
    return {"training": train, "evaluation": evaluation}


@pytest.fixture(scope="session")
def criteo_libsvm(tmp_path_factory):
    """The Criteo sample converted to libsvm, in two files (`trainer convert`)."""
    from trainer.data import convert

    folder = tmp_path_factory.mktemp("criteo-libsvm")
    result = convert.convert([shared_file(CRITEO_SAMPLE)], str(folder), output_format="libsvm", num_files=2)
    return result["files"]


class JobRun:
    def __init__(self, job_dir: str, exit_code: int, log: str):
        self.job_dir, self.exit_code, self.log = job_dir, exit_code, log

    @property
    def job_name(self) -> str:
        """The name `trainer local` gave the job (kept in its folder, or its hosts' parent folder)."""
        for folder in (self.job_dir, os.path.dirname(self.job_dir)):
            if os.path.exists(os.path.join(folder, "job-name")):
                return open(os.path.join(folder, "job-name")).read().strip()
        raise AssertionError(f"no job-name in {self.job_dir}")

    @property
    def failure(self) -> str | None:
        path = os.path.join(self.job_dir, "output", "failure")
        return open(path).read() if os.path.exists(path) else None

    @property
    def succeeded(self) -> bool:
        return os.path.exists(os.path.join(self.job_dir, "output", "success"))

    @property
    def metrics(self) -> dict:
        with open(os.path.join(self.job_dir, "output", "data", "metrics.json")) as f:
            return json.load(f)


def local_command(job_dir, channels: dict, hyperparameters: dict | None = None, input_mode: str = "File",
                  hosts: int = 1, instance_type: str = "local", sharded: tuple = (),
                  checkpoint_local_path=None, channel_config: tuple = (), groups: str = "",
                  host_cpus: int = 0, network_interface: str = "", job_name: str = "") -> list[str]:
    """The `trainer local` command line of a job (`sharded`: channels given ShardedByS3Key;
    `groups`: a heterogeneous cluster's instance groups, `--groups` of `trainer local`;
    `host_cpus`: each host on that many CPUs of its own; `network_interface`: the one
    resourceconfig.json names, default eth0; `job_name`: TRAINING_JOB_NAME, default the job folder's)."""
    command = [sys.executable, "-m", "trainer", "local", "--job-dir", str(job_dir), "--input-mode", input_mode,
               "--hosts", str(hosts), "--instance-type", instance_type]
    if job_name:
        command += ["--job-name", job_name]
    if network_interface:
        command += ["--network-interface-name", network_interface]
    if host_cpus:
        command += ["--host-cpus", str(host_cpus)]
    if groups:
        command += ["--groups", groups]
    if checkpoint_local_path:
        command += ["--checkpoint-local-path", str(checkpoint_local_path)]
    for setting in channel_config:  # "NAME:KEY=VALUE"
        command += ["--channel-config", setting]
    for name in sharded:
        command += ["--sharded-channel", name]
    for name, paths in channels.items():
        for path in paths if isinstance(paths, (list, tuple)) else [paths]:
            command += ["--channel", f"{name}={path}"]
    for key, value in (hyperparameters or {}).items():
        command += ["--hp", f"{key}={value}"]
    return command


def group_hosts(groups: str) -> int:
    """The hosts of `trainer local --groups`' value (0: none given)."""
    return sum(int(item.split("=")[1].split(":")[0]) for item in groups.split(",")) if groups else 0


def first_host_folder(job_dir, hosts: int) -> str:
    return str(job_dir) if hosts == 1 else os.path.join(str(job_dir), "algo-1")


def run_local(job_dir, channels: dict, hyperparameters: dict | None = None, input_mode: str = "File",
              timeout: float = JOB_TIMEOUT_SEC, hosts: int = 1, instance_type: str = "local",
              sharded: tuple = (), checkpoint_local_path=None, channel_config: tuple = (), groups: str = "",
              env: dict | None = None, host_cpus: int = 0, network_interface: str = "", job_name: str = "") -> JobRun:
    """`trainer local` in a subprocess, as a user runs it; its output is captured. With
    several hosts (`hosts`, or the sum of `groups`'), `job_dir` of the result is the first host's folder.
    `env`: the job's environment (default: this process's)."""
    command = local_command(job_dir, channels, hyperparameters, input_mode, hosts, instance_type, sharded,
                            checkpoint_local_path, channel_config, groups, host_cpus, network_interface, job_name)
    hosts = group_hosts(groups) or hosts
    # Its own process group: a hang guard that fires stops every host of the job, not only `trainer local`.
    process = subprocess.Popen(command, cwd=PROJECT_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env=env)
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise
    return JobRun(first_host_folder(job_dir, hosts), process.returncode, out + err)


def pids_of(command_part: str, environment: dict[str, str]) -> list[int]:
    """Processes whose command line holds `command_part` and whose environment holds all of
    `environment` (how a test finds one rank or task of its own job)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                command = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{entry}/environ", "rb") as f:
                env = dict(item.split("=", 1) for item in f.read().decode(errors="replace").split("\0") if "=" in item)
        except OSError:
            continue
        if command_part in command and all(env.get(k) == v for k, v in environment.items()):
            found.append(int(entry))
    return found


def remove_containers(engine: str, *names: str) -> None:
    """Remove containers now, running or not, including names that were never started
    (podman's `--ignore`: without it one missing name makes podman remove none of them;
    `-t 0`: no 10 s wait for a SIGTERM that a PID 1 without a handler ignores; docker's
    `rm -f` kills at once and removes the others when one name is missing)."""
    podman_only = ["--ignore", "-t", "0"] if engine == "podman" else []
    subprocess.run([engine, "rm", "-f", *podman_only, *names], capture_output=True)


IMAGE = "localhost/sagemaker-tf-trainer:cpu"
# build.sh's CACHE_DIR, where `./build.sh image` keeps the lock it builds each image under.
BUILD_CACHE = os.path.join(os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "sagemaker-tf-trainer")
cores.BUILD_LOCKS.update({"image": os.path.join(BUILD_CACHE, "image-2.14-cpu.lock"),
                          "image_2_21": os.path.join(BUILD_CACHE, "image-2.21-cpu.lock")})


@pytest.fixture(scope="session")
def image():
    """Build the CPU image with `./build.sh image cpu` (cached layers: seconds when nothing
    changed); the engine's name (docker or podman)."""
    done = subprocess.run(["./build.sh", "image", "cpu"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    engine = subprocess.run(["docker/engine.sh", "name"], cwd=PROJECT_ROOT, capture_output=True, text=True)
    return engine.stdout.strip()


IMAGE_2_21 = "localhost/sagemaker-tf-trainer:2.21-cpu"


@pytest.fixture(scope="session")
def image_2_21(image):
    """Build the TensorFlow 2.21 line's CPU image with `./build.sh image cpu 2.21` (after the
    2.14 one, which the suite's early build makes first); the engine's name."""
    done = subprocess.run(["./build.sh", "image", "cpu", "2.21"], cwd=PROJECT_ROOT, capture_output=True, text=True,
                          timeout=3600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return image


@pytest.fixture(scope="session")
def network_ready(image):
    """Before the first multi-host job: two containers on one network must find each other
    by name (`./build.sh preflight`), or every multi-host test would wait for hosts it
    cannot find. The engine's name."""
    done = subprocess.run(["./build.sh", "preflight"], cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return image


# The fault tests' table: what the user sees and how long the job took to end, per fault
# (written to out/faults.md at the end of the session; the table of docs/faults.md).
FAULTS_REPORT = os.path.join(PROJECT_ROOT, "out", "faults.md")
_fault_rows: list[tuple[str, str, float]] = []


@pytest.fixture
def record_fault():
    """record_fault(fault, what the user sees, seconds)."""
    return lambda fault, seen, seconds: _fault_rows.append((fault, seen, seconds))


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """With several test processes (pytest-xdist): each one's rows, gathered here."""
    _fault_rows.extend(tuple(row) for row in json.loads(getattr(node, "workeroutput", {}).get("fault_rows", "[]")))


def pytest_sessionfinish(session, exitstatus):
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # a test process of several: its rows go to the one that writes the table
        workeroutput["fault_rows"] = json.dumps(_fault_rows)
        return
    if not _fault_rows:
        return
    os.makedirs(os.path.dirname(FAULTS_REPORT), exist_ok=True)
    lines = ["| fault | what the user sees (failure file, first line) | time to end |", "|---|---|---|"]
    for fault, seen, seconds in _fault_rows:
        lines.append(f"| {fault} | `{seen.replace('|', '/')}` | {seconds:.1f} s |")
    with open(FAULTS_REPORT, "w") as f:
        f.write("\n".join(lines) + "\n")

"""A job's hosts as containers of the image, as SageMaker runs them: `<engine> run <image>
train` on every host, each with its own /opt/ml, on a network where the hosts find each
other by their names (algo-1, algo-2, ...). A test starts the hosts it wants (a host that
is never started does not resolve), watches their logs, signals or kills what it wants,
and everything is removed when it ends, whatever happened."""
from __future__ import annotations

import os
import re
import subprocess
import time
import uuid

import pytest

from conftest import IMAGE, PROJECT_ROOT, remove_containers
from trainer.local.runner import LocalJob, PipeFeeder

SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")  # mounted into every host, read-only


class ContainerHosts:
    def __init__(self, engine: str, job: LocalJob, job_dir: str, data_dirs: list[str]):
        self.engine, self.job = engine, job
        self.folders = job.lay_out(str(job_dir))
        self.data_dirs = data_dirs
        self.tag = f"trainer-test-{uuid.uuid4().hex[:8]}"
        self.network = f"{self.tag}-net"
        self.started: dict[str, float] = {}
        self.feeders = [PipeFeeder(os.path.join(folder, "input", "data", name), job.files(name, index))
                        for index, folder in enumerate(self.folders.values()) for name in job.channels
                        ] if job.input_mode == "Pipe" else []  # SageMaker's agent, streaming each host's FIFOs
        for feeder in self.feeders:
            feeder.start()
        self._run([engine, "network", "create", self.network])

    def _run(self, command: list[str], timeout: float = 60, check: bool = True) -> subprocess.CompletedProcess:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
        assert done.returncode == 0 or not check, f"{' '.join(command)}: {done.stderr}"
        return done

    def name(self, host: str) -> str:
        return f"{self.tag}-{host}"

    def start(self, *hosts: str, env: dict[str, str] | None = None) -> None:
        for host in hosts or self.job.host_names:
            mounts = ["-v", f"{self.folders[host]}:/opt/ml"]
            mounts += [arg for key, value in (env or {}).items() for arg in ("-e", f"{key}={value}")]
            for folder in self.data_dirs:  # the job's channel links point here
                mounts += ["-v", f"{folder}:{folder}:ro"]
            self._run([self.engine, "run", "-d", "--name", self.name(host), "--hostname", host,
                       "--network", self.network, "--network-alias", host, "--shm-size", "1g",
                       *mounts, IMAGE, "train"])
            self.started[host] = time.monotonic()

    def outsider(self, command: list[str], timeout: float = 120) -> subprocess.CompletedProcess:
        """`command` in a container of the same image on the job's network that is not one
        of the job's hosts (a machine on the same subnet as a job's hosts)."""
        return self._run([self.engine, "run", "--rm", "--name", self.name("outsider"), "--network", self.network,
                          IMAGE, *command], timeout=timeout, check=False)

    def logs(self, host: str) -> str:
        done = self._run([self.engine, "logs", self.name(host)], check=False)
        return done.stdout + done.stderr

    def wait_for_log(self, host: str, pattern: str, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if re.search(pattern, self.logs(host)):
                return
            if not self.running(host):
                break
            time.sleep(0.5)
        raise AssertionError(f"{host}: no log line matched {pattern!r}; its log ends:\n{self.logs(host)[-4000:]}")

    def running(self, host: str) -> bool:
        done = self._run([self.engine, "inspect", "--format", "{{.State.Running}}", self.name(host)], check=False)
        return done.stdout.strip() == "true"

    def wait(self, host: str, timeout: float) -> int:
        """The host's exit code once its container has ended (within `timeout`)."""
        try:
            self._run([self.engine, "wait", self.name(host)], timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{host} did not end within {timeout:.0f} s; its log ends:\n"
                                 f"{self.logs(host)[-4000:]}") from None
        done = self._run([self.engine, "inspect", "--format", "{{.State.ExitCode}}", self.name(host)])
        return int(done.stdout.strip())

    def signal(self, host: str, signal_name: str) -> None:
        self._run([self.engine, "kill", "--signal", signal_name, self.name(host)])

    def exec(self, host: str, command: str) -> str:
        return self._run([self.engine, "exec", self.name(host), "sh", "-c", command]).stdout

    def failure(self, host: str) -> str | None:
        path = os.path.join(self.folders[host], "output", "failure")
        return open(path).read() if os.path.exists(path) else None

    def first_failure_line(self, host: str) -> str:
        failure = self.failure(host)
        assert failure, f"{host} wrote no failure file; its log ends:\n{self.logs(host)[-4000:]}"
        return failure.splitlines()[0]

    def remove(self) -> None:
        for feeder in self.feeders:
            feeder.stop()
        names = [self.name(host) for host in (*self.job.host_names, "outsider")]
        remove_containers(self.engine, *names)
        self._run([self.engine, "network", "rm", self.network], check=False)

    def leftovers(self) -> list[str]:
        """What of this test is still in the engine (nothing, once removed)."""
        done = self._run([self.engine, "ps", "-a", "--format", "{{.Names}}"], check=False)
        networks = self._run([self.engine, "network", "ls", "--format", "{{.Name}}"], check=False)
        return [name for name in done.stdout.split() + networks.stdout.split() if name.startswith(self.tag)]


@pytest.fixture
def hosts_of(network_ready, aws_split, tmp_path):
    """hosts_of(hyperparameters, hosts=2, input_mode="File"): a job's hosts as containers
    (in Pipe mode with their FIFOs fed), removed at the end."""
    made = []

    def make(hyperparameters: dict, hosts: int = 2, input_mode: str = "File") -> ContainerHosts:
        job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                       {key: str(value) for key, value in hyperparameters.items()}, input_mode, hosts=hosts)
        made.append(ContainerHosts(network_ready, job, tmp_path / f"job{len(made)}",
                                   [os.path.dirname(aws_split["training"]), SCRIPTS]))
        return made[-1]

    yield make
    for cluster in made:
        cluster.remove()
        assert cluster.leftovers() == []

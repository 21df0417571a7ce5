"""Host faults of multi-host jobs, in network namespaces (a host each, SageMaker's names and
ports): a second host that resolves but whose `train` never answers, the parameter-server
coordinator's host lost mid-training, and the end of a job whose hosts end apart (a host
stopped after its part succeeded, a host whose peer never ends). Each asserts the exit
status, the failure file's first line (or that there is none) and a bound on the time to end."""
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from bounds import FINAL_STATE_WAIT_SEC, PEER_LOST_SEC, within
from conftest import JOB_TIMEOUT_SEC, PROJECT_ROOT, pids_of, run_local
from trainer.local.runner import LocalJob
from trainer.local.netns import HostNamespaces
from watched import WatchedJob, first_line

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="simulated hosts need network namespaces: root and iproute2"),
]
SCRIPTS = os.path.join(PROJECT_ROOT, "tests", "scripts")


def failure_line(folder: str) -> str:
    with open(os.path.join(folder, "output", "failure")) as f:
        return f.readline().strip()


@pytest.mark.cores(1)
def test_a_second_host_that_resolves_but_never_answers(aws_split, tmp_path, record_fault):
    peer_wait_sec = 5
    job = LocalJob({"training": [aws_split["training"]], "evaluation": [aws_split["evaluation"]]},
                   {"distribution": "multi_worker_mirrored", "peer_wait_sec": str(peer_wait_sec)}, hosts=2)
    folders = job.lay_out(str(tmp_path / "job"))
    started = time.monotonic()
    with HostNamespaces(job.host_names) as namespaces:  # algo-2 has an address, and nothing runs there
        done = subprocess.run(namespaces.command("algo-1", [sys.executable, "-m", "trainer.commands.train"]), cwd=PROJECT_ROOT,
                              env={**os.environ, "SAGEMAKER_BASE_DIR": folders["algo-1"]}, capture_output=True,
                              text=True, timeout=JOB_TIMEOUT_SEC)
    seconds = time.monotonic() - started
    assert done.returncode == 1, done.stdout[-3000:]
    line = failure_line(folders["algo-1"])
    assert line.startswith(f"algo-2's train never answered on port 2225 (tried for {peer_wait_sec} s, peer_wait_sec): "
                           "one that resolves but does not answer has not started its part or failed first"), line
    assert seconds < within(peer_wait_sec)  # timed from the start
    record_fault(f"a second host that resolves but never starts its part (peer_wait_sec={peer_wait_sec}; "
                 "time from the start)", line, seconds)


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_lost_coordinator_host_fails_the_other_hosts_naming_it(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, {"distribution": "parameter_server", "num_epochs": 1000}, hosts=2)
    job.wait_for(r"epoch=1 steps=\d+")
    first_host = pids_of("trainer.commands.train", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job" / "algo-1")})
    assert len(first_host) == 1, first_host
    os.kill(first_host[0], signal.SIGKILL)  # the whole host's `train` and its tasks, as when an instance is lost
    killed = time.monotonic()
    job.finish(timeout=within(PEER_LOST_SEC) + 60)  # a hang guard
    seconds = time.monotonic() - killed
    second_host = str(tmp_path / "job" / "algo-2")
    line = failure_line(second_host)
    assert line == ("algo-2: the coordinator on algo-1 stopped answering before the job ended (for 10 s): "
                    "its host failed or was lost; see its log"), line
    assert "the coordinator on algo-1 is done" not in job.log  # not taken for a finished one
    assert seconds < within(PEER_LOST_SEC)
    assert not pids_of("trainer", {"SAGEMAKER_BASE_DIR": second_host})  # its tasks ended with it
    record_fault("the parameter-server coordinator's host lost (SIGKILL to its `train`), another host's "
                 "failure file", line, seconds)


class HostProcess:
    """One host's `train`, started in its namespace, its output kept in a file."""

    def __init__(self, namespaces, host: str, folder: str, log_path):
        self.host, self.folder, self.log_path = host, folder, log_path
        with open(log_path, "wb") as log:
            self.process = subprocess.Popen(namespaces.command(host, [sys.executable, "-m", "trainer.commands.train"]),
                                            cwd=PROJECT_ROOT, env={**os.environ, "SAGEMAKER_BASE_DIR": folder},
                                            stdout=log, stderr=subprocess.STDOUT)

    @property
    def log(self) -> str:
        return open(self.log_path, errors="replace").read()

    def wait_for_log(self, text: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.process.poll() is None:
            if text in self.log:
                return
            time.sleep(0.1)
        assert text in self.log, f"{self.host}: no {text!r} in its log:\n{self.log[-3000:]}"

    def output(self, name: str) -> bool:
        return os.path.exists(os.path.join(self.folder, "output", name))


@contextlib.contextmanager
def hosts_apart(tmp_path, **hyperparameters):
    """A two-host script job with no distribution whose first host trains for 10 minutes
    and whose second host ends at once; every host's `train` is killed at the end."""
    job = LocalJob({}, {"sagemaker_program": "end_apart.py", "sagemaker_submit_directory": SCRIPTS,
                        "seconds_first": "600", "seconds_others": "0",
                        **{k: str(v) for k, v in hyperparameters.items()}}, hosts=2)
    folders = job.lay_out(str(tmp_path / "job"))
    with HostNamespaces(job.host_names) as namespaces:
        hosts = [HostProcess(namespaces, host, folders[host], tmp_path / f"{host}.log") for host in job.host_names]
        try:
            yield hosts
        finally:
            for host in hosts:
                if host.process.poll() is None:
                    host.process.kill()  # its script dies with it
                host.process.wait()


@pytest.mark.cores(1)
def test_a_host_stopped_after_its_part_succeeded_ends_with_success(tmp_path, record_fault):
    """SageMaker's local mode stops every container once the first one exits: a host whose
    part is over keeps its success (exit 0, no failure file, the model kept)."""
    with hosts_apart(tmp_path) as (first, second):
        second.wait_for_log("this host's part has ended; waiting for algo-1 to end theirs")
        stopped = time.monotonic()
        second.process.send_signal(signal.SIGTERM)
        code = second.process.wait(timeout=within(0))
        seconds = time.monotonic() - stopped
        assert first.process.poll() is None  # still training
    assert code == 0, second.log[-3000:]
    assert second.output("success") and not second.output("failure"), second.log[-3000:]
    assert "SIGTERM after this host's part succeeded: ending with success" in second.log
    assert seconds < within(0)  # at once: not after its wait for the others (peer_wait_sec, 300 s)
    record_fault("SIGTERM to a host whose part has succeeded while another host still trains (exit 0)",
                 "(none: output/success, exit 0)", seconds)


@pytest.mark.cores(1)
def test_a_host_whose_peer_never_ends_exits_within_the_bound(tmp_path, record_fault):
    peer_wait_sec = 5
    with hosts_apart(tmp_path, peer_wait_sec=peer_wait_sec) as (first, second):
        second.wait_for_log("this host's part has ended; waiting for algo-1 to end theirs")
        ended = time.monotonic()
        code = second.process.wait(timeout=within(peer_wait_sec))
        seconds = time.monotonic() - ended
        assert first.process.poll() is None
    assert code == 0 and second.output("success") and not second.output("failure"), second.log[-3000:]
    said = (f"algo-1 did not end its part within {peer_wait_sec} s (peer_wait_sec): this host ends anyway, its own "
            "part having succeeded; see algo-1's log")
    assert said in second.log
    assert peer_wait_sec - 1 <= seconds < within(peer_wait_sec)  # timed from the log line, just after the wait began
    record_fault(f"a host whose part succeeded, while another host never ends its own (peer_wait_sec="
                 f"{peer_wait_sec}; exit 0, the log names it)", said, seconds)


@pytest.mark.cores(1)
def test_a_host_whose_sshd_cannot_start_ends_every_host_within_seconds(aws_split, tmp_path, monkeypatch,
                                                                       record_fault):
    """Horovod across hosts: algo-2 has no sshd. It fails at once, and algo-1, waiting for
    that sshd, reads algo-2's failure on its status port and ends too, naming it."""
    monkeypatch.setenv("TRAINER_SSHD", "/nonexistent/sshd")  # reaches every host's `train`
    started = time.monotonic()
    run = run_local(tmp_path / "job", aws_split, {"distribution": "horovod", "processes_per_host": 2}, hosts=2,
                    timeout=120)
    seconds = time.monotonic() - started
    assert run.exit_code == 1, run.log[-3000:]
    line = first_line(run)
    assert line.startswith("algo-2 failed: cannot start sshd, which MPI across hosts needs: /nonexistent/sshd "
                           "does not exist"), line
    second = open(os.path.join(str(tmp_path / "job"), "algo-2", "output", "failure")).readline()
    assert second.startswith("algo-2: cannot start sshd"), second
    # algo-2 keeps its reason up for the others at most FINAL_STATE_WAIT_SEC; nobody waits out peer_wait_sec (300 s).
    assert seconds < within(FINAL_STATE_WAIT_SEC), seconds
    record_fault("Horovod across hosts: a host whose sshd cannot start, the first host's failure file", line,
                 seconds)


@pytest.mark.cores(1)  # about one core busy (measured: TRAINER_TEST_CPU_LOG)
def test_a_lost_data_host_ends_the_job_naming_it(aws_split, tmp_path, record_fault):
    """A heterogeneous cluster's data host lost mid-training (SIGKILL to its `train`: its
    tf.data service tasks die with it): the training host ends the job, naming it, instead of
    waiting for the service's lost worker to come back."""
    job = WatchedJob(tmp_path / "job", aws_split, {"num_epochs": 1000, "training_groups": "train"},
                     groups="train=1,data=1")
    job.wait_for(r"epoch=1 steps=\d+")
    data_host = str(tmp_path / "job" / "algo-2")
    killed_train = pids_of("trainer.commands.train", {"SAGEMAKER_BASE_DIR": data_host})
    assert len(killed_train) == 1, killed_train
    os.kill(killed_train[0], signal.SIGKILL)
    killed = time.monotonic()
    run = job.finish(timeout=within(PEER_LOST_SEC) + 60)  # a hang guard
    seconds = time.monotonic() - killed
    assert run.exit_code == 1, run.log[-3000:]
    line = first_line(run)
    assert line.startswith("data host algo-2 ended before the training did (algo-1: data host algo-2 stopped "
                           "answering before the job ended (for 10 s)"), line
    assert seconds < within(PEER_LOST_SEC)
    assert not pids_of("trainer", {"SAGEMAKER_BASE_DIR": data_host})  # its tf.data service tasks ended with it
    record_fault("a heterogeneous cluster's data host lost (SIGKILL to its `train`), the training host's "
                 "failure file", line, seconds)

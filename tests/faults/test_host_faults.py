"""Host faults of multi-host jobs, in network namespaces (a host each, SageMaker's names and
ports): a second host that resolves but whose `train` never answers, and the parameter-
server coordinator's host lost mid-training. Each asserts the exit status, the failure
file's first line and a bound on the time to end."""
import os
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import JOB_TIMEOUT_SEC, PROJECT_ROOT, pids_of
from trainer.local.runner import LocalJob
from trainer.local.netns import HostNamespaces
from watched import WatchedJob

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0 or shutil.which("ip") is None,
                       reason="simulated hosts need network namespaces: root and iproute2"),
]
END_WITHIN_SEC = 60  # after the fault: a hang guard, not a speed claim


def failure_line(folder: str) -> str:
    with open(os.path.join(folder, "output", "failure")) as f:
        return f.readline().strip()


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
    assert seconds < peer_wait_sec + END_WITHIN_SEC
    record_fault(f"a second host that resolves but never starts its part (peer_wait_sec={peer_wait_sec}; "
                 "time from the start)", line, seconds)


def test_a_lost_coordinator_host_fails_the_other_hosts_naming_it(aws_split, tmp_path, record_fault):
    job = WatchedJob(tmp_path / "job", aws_split, {"distribution": "parameter_server", "num_epochs": 1000}, hosts=2)
    job.wait_for(r"epoch=1 steps=\d+")
    first_host = pids_of("trainer.commands.train", {"SAGEMAKER_BASE_DIR": str(tmp_path / "job" / "algo-1")})
    assert len(first_host) == 1, first_host
    os.kill(first_host[0], signal.SIGKILL)  # the whole host's `train` and its tasks, as when an instance is lost
    killed = time.monotonic()
    job.finish(timeout=END_WITHIN_SEC + 60)
    seconds = time.monotonic() - killed
    second_host = str(tmp_path / "job" / "algo-2")
    line = failure_line(second_host)
    assert line == ("algo-2: the coordinator on algo-1 stopped answering before the job ended (for 10 s): "
                    "its host failed or was lost; see its log"), line
    assert "the coordinator on algo-1 is done" not in job.log  # not taken for a finished one
    assert seconds < END_WITHIN_SEC
    assert not pids_of("trainer", {"SAGEMAKER_BASE_DIR": second_host})  # its tasks ended with it
    record_fault("the parameter-server coordinator's host lost (SIGKILL to its `train`), another host's "
                 "failure file", line, seconds)

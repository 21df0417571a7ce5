"""Multi-host jobs in containers, for real: a second host that never starts, SIGTERM while a
host waits for the others, Horovod across two hosts through the SageMaker toolkit's MPI
setup with a rank killed or every host stopped, and hosts that end apart (one stopped after
its part succeeded, one whose peer never ends). Each asserts the exit status, the failure
file's first line (or that there is none) and, as a hang guard, a bound on the time to end;
nothing of a test is left in the engine after it."""
import os
import re
import subprocess
import time

import pytest

from bounds import PEER_LOST_SEC, STOP_GRACE_SEC, within
from hosts import SCRIPTS, hosts_of  # noqa: F401

pytestmark = [pytest.mark.slow, pytest.mark.container]
PEER_WAIT_SEC = 15


@pytest.mark.cores(0)  # mostly waits (measured: TRAINER_TEST_CPU_LOG)
def test_a_second_host_that_never_starts(hosts_of, record_fault):
    cluster = hosts_of({"distribution": "parameter_server", "peer_wait_sec": PEER_WAIT_SEC})
    cluster.start("algo-1")
    code = cluster.wait("algo-1", timeout=within(PEER_WAIT_SEC))
    seconds = time.monotonic() - cluster.started["algo-1"]
    line = cluster.first_failure_line("algo-1")
    assert code == 1, cluster.logs("algo-1")[-3000:]
    assert line.startswith(f"host algo-2 never resolved (tried for {PEER_WAIT_SEC} s, peer_wait_sec)"), line
    log = cluster.logs("algo-1")
    assert "still waiting after" in log and "algo-2 (does not resolve)" in log  # said while it waited
    record_fault(f"a second host that never starts (peer_wait_sec={PEER_WAIT_SEC}; time from the container's "
                 "start)", line, seconds)


@pytest.mark.cores(1)
def test_sigterm_while_waiting_for_a_host_ends_the_container(hosts_of, record_fault):
    cluster = hosts_of({"distribution": "parameter_server", "peer_wait_sec": 300})
    cluster.start("algo-1")
    cluster.wait_for_log("algo-1", "waiting for the job's other hosts")
    stopped = time.monotonic()
    # `stop -t 10`: SIGTERM, and SIGKILL (exit 137) if the container is still there after 10 s.
    subprocess.run([cluster.engine, "stop", "-t", "10", cluster.name("algo-1")], check=True, capture_output=True,
                   timeout=60)
    seconds = time.monotonic() - stopped
    code = cluster.wait("algo-1", timeout=30)
    line = cluster.first_failure_line("algo-1")
    assert code == 143, f"exit {code}: not ended by its own SIGTERM handler\n" + cluster.logs("algo-1")[-3000:]
    assert line == "stopped by SIGTERM outside training (while starting or ending): nothing to save", line
    record_fault("SIGTERM while a host waits for the others to start (`stop -t 10` to the container, PID 1)", line,
                 seconds)


MPI_2X2 = {"sagemaker_mpi_enabled": "true", "sagemaker_mpi_num_of_processes_per_host": 2, "num_epochs": 200,
           "log_steps": 1, "peer_wait_sec": 120}


def test_a_rank_killed_on_the_second_host_is_named_first(hosts_of, record_fault):
    cluster = hosts_of(MPI_2X2)
    cluster.start()
    cluster.wait_for_log("algo-1", r"samples/sec=")
    pid = cluster.exec("algo-2", "pgrep -f 'mpi4py .*worker.py' | head -1").strip()
    assert pid, cluster.exec("algo-2", "ps ax")
    cluster.exec("algo-2", f"kill -9 {pid}")
    killed = time.monotonic()
    codes = {host: cluster.wait(host, timeout=within(PEER_LOST_SEC)) for host in ("algo-1", "algo-2")}
    seconds = time.monotonic() - killed
    line = cluster.first_failure_line("algo-1")
    assert codes["algo-1"] != 0 and codes["algo-2"] != 0, codes
    assert re.fullmatch(r"rank [23] on algo-2 was killed by signal 9 \(SIGKILL\); the other processes were ended "
                        r"because of it", line), line
    assert cluster.first_failure_line("algo-2") == f"algo-2: the MPI master on algo-1 failed: {line}"
    record_fault("Horovod across 2 hosts (toolkit MPI, 2 ranks each): a rank on the second host killed with SIGKILL",
                 line, seconds)


def test_sigterm_to_every_host_stops_the_ranks_and_the_chief_saves(hosts_of, record_fault):
    cluster = hosts_of(MPI_2X2)
    cluster.start()
    cluster.wait_for_log("algo-1", r"samples/sec=")
    for host in ("algo-1", "algo-2"):  # as SageMaker's StopTrainingJob (or a spot interruption) does
        cluster.signal(host, "TERM")
    stopped = time.monotonic()
    codes = {host: cluster.wait(host, timeout=within(STOP_GRACE_SEC)) for host in ("algo-1", "algo-2")}
    seconds = time.monotonic() - stopped
    line = cluster.first_failure_line("algo-1")
    assert codes == {"algo-1": 143, "algo-2": 143}, (codes, cluster.logs("algo-1")[-3000:])
    # The stop lands at the next step boundary, or at an epoch's end when that comes first
    # (8 steps an epoch here).
    assert re.match(r"rank 0 on algo-1: stopped by SIGTERM at (step \d+ |the end of epoch \d+ \(step \d+\)).*; "
                    r"checkpoint saved in /opt/ml/checkpoints", line), line
    assert os.listdir(os.path.join(cluster.folders["algo-1"], "checkpoints"))
    assert cluster.first_failure_line("algo-2").startswith("algo-2: the job was stopped; the MPI master on algo-1: ")
    record_fault("SIGTERM to both hosts of Horovod across 2 hosts (toolkit MPI): every rank stops at one step, "
                 "the chief saves", line, seconds)


# A two-host script job with no distribution whose first host trains for 10 minutes and
# whose second host ends at once (tests/scripts/end_apart.py).
HOSTS_APART = {"sagemaker_program": "end_apart.py", "sagemaker_submit_directory": SCRIPTS, "seconds_first": 600,
               "seconds_others": 0}


@pytest.mark.cores(1)
def test_a_host_stopped_after_its_part_succeeded_exits_0(hosts_of, record_fault):
    """As SageMaker's local mode stops the other containers once one exits: the second
    host, stopped while it waits for the first, keeps its success."""
    cluster = hosts_of(HOSTS_APART)
    cluster.start()
    cluster.wait_for_log("algo-2", "this host's part has ended; waiting for algo-1 to end theirs")
    cluster.signal("algo-2", "TERM")
    stopped = time.monotonic()
    code = cluster.wait("algo-2", timeout=within(0))  # at once: not after its wait for algo-1
    seconds = time.monotonic() - stopped
    assert code == 0, cluster.logs("algo-2")[-3000:]
    assert cluster.failure("algo-2") is None
    assert os.path.exists(os.path.join(cluster.folders["algo-2"], "output", "success"))
    assert "SIGTERM after this host's part succeeded: ending with success" in cluster.logs("algo-2")
    assert cluster.running("algo-1")
    record_fault("SIGTERM to a host (container) whose part has succeeded while another still trains (exit 0)",
                 "(none: output/success, exit 0)", seconds)


@pytest.mark.cores(1)
def test_a_host_whose_peer_never_ends_exits_within_the_bound(hosts_of):
    cluster = hosts_of({**HOSTS_APART, "peer_wait_sec": 5})
    cluster.start()
    cluster.wait_for_log("algo-2", "this host's part has ended; waiting for algo-1 to end theirs")
    assert cluster.wait("algo-2", timeout=within(5)) == 0, cluster.logs("algo-2")[-3000:]
    assert ("algo-1 did not end its part within 5 s (peer_wait_sec): this host ends anyway, its own part having "
            "succeeded; see algo-1's log") in cluster.logs("algo-2")
    assert cluster.failure("algo-2") is None and cluster.running("algo-1")

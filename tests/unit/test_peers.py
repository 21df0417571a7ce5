"""Waiting for the job's other hosts and following the leader's end, over real sockets on
this machine: what answers, what never resolves, what never answers, and how a leader's
final state (or its silence) reaches a follower."""
import logging
import os
import re
import signal
import socket
import threading
import time

import pytest

from trainer.contract import addresses
from trainer.supervision import peers
from trainer.errors import JobError, PeerLost, Stopped
from trainer.plan.types import PeerWait

UNRESOLVABLE = "algo-2.invalid"  # .invalid never resolves (RFC 2606)
JOB = ("localhost",)  # the job's hosts in these tests: every peer is this machine


@pytest.fixture
def listening():
    """A port on this machine that answers."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server.getsockname()[1]
    server.close()


def closed_port() -> int:
    with socket.create_server(("127.0.0.1", 0)) as server:
        return server.getsockname()[1]


def test_returns_once_every_peer_answers(listening):
    peers.wait_for([PeerWait("localhost", listening, "train")], timeout_sec=5, poll_sec=0.1)


WAIT_CASES = {
    # peers -> the failure's first words (the hosts named, and how long it tried)
    "a host that never resolves": (
        lambda: [PeerWait(UNRESOLVABLE, 2225, "train")],
        lambda waits: f"host {UNRESOLVABLE} never resolved (tried for 1 s, peer_wait_sec): "
                      "a host that does not resolve never started"),
    "one that resolves and never answers": (
        lambda: [PeerWait("localhost", closed_port(), "ps task")],
        lambda waits: f"localhost's ps task never answered on port {waits[0].port} (tried for 1 s, peer_wait_sec)"),
    "several peers of one unresolved host named once": (
        lambda: [PeerWait(UNRESOLVABLE, 2225, "train"), PeerWait(UNRESOLVABLE, 2223, "ps task")],
        lambda waits: f"host {UNRESOLVABLE} never resolved (tried for 1 s"),
}


@pytest.mark.parametrize("name", WAIT_CASES)
def test_failure_names_the_missing_hosts(name):
    make, expected = WAIT_CASES[name]
    waits = make()
    with pytest.raises(JobError) as failed:
        peers.wait_for(waits, timeout_sec=1, poll_sec=0.2)
    assert str(failed.value).startswith(expected(waits)), str(failed.value)


def test_an_answering_peer_is_not_named_with_the_missing_one(listening):
    with pytest.raises(JobError) as failed:
        peers.wait_for([PeerWait("localhost", listening, "train"), PeerWait(UNRESOLVABLE, 2225, "train")],
                       timeout_sec=1, poll_sec=0.2)
    assert str(failed.value).startswith(f"host {UNRESOLVABLE} never resolved") and "localhost" not in str(failed.value)


def test_the_wait_logs_which_hosts_are_still_missing(caplog, listening):
    caplog.set_level(logging.INFO, logger="trainer")
    with pytest.raises(JobError):
        peers.wait_for([PeerWait(UNRESOLVABLE, 2225, "train"), PeerWait("localhost", listening, "train")],
                       timeout_sec=1.5, poll_sec=0.2, log_every_sec=0.5)
    progress = [r.getMessage() for r in caplog.records if r.getMessage().startswith("still waiting")]
    assert progress and all(f"for 1 of 2: {UNRESOLVABLE} (does not resolve)" in line for line in progress)


def test_sigterm_ends_the_wait():
    def stop(signum, frame):
        raise Stopped("stopped by SIGTERM")

    previous = signal.signal(signal.SIGTERM, stop)
    threading.Timer(0.5, os.kill, (os.getpid(), signal.SIGTERM)).start()
    try:
        with pytest.raises(Stopped):  # not the JobError that ends the wait after 60 s
            peers.wait_for([PeerWait(UNRESOLVABLE, 2225, "train")], timeout_sec=60, poll_sec=0.2)
    finally:
        signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def leader():
    server = peers.StatusServer("algo-1", 0, JOB)
    yield server
    server.close()


def follow(server, **kwargs):
    peers.follow("localhost", server.port, "algo-2", "the coordinator on algo-1", poll_sec=0.1, **kwargs)


def end(leader, state, reason=""):
    """The leader's end: its final state, read by algo-2, then its process (port) gone."""
    def run():
        leader.finish(state, reason)
        time.sleep(1.0)  # the follower polls every 0.1 s
        leader.close()

    threading.Thread(target=run).start()


def test_a_follower_returns_once_the_leader_is_done(leader):
    assert peers.read_status("localhost", leader.port, "algo-2") == "running"
    started = time.monotonic()
    threading.Timer(0.3, leader.finish, (peers.DONE,)).start()  # its process goes on (waiting for the job's end)
    follow(leader)
    assert time.monotonic() - started < 5
    assert peers.read_status("localhost", leader.port, "algo-2") == "done"


FINAL_CASES = {
    # the leader's final state -> what the follower raises, and its first words
    "failed": (peers.FAILED, "rank 3 on algo-2 was killed by signal 9 (SIGKILL)", PeerLost,
               "algo-2: the coordinator on algo-1 failed: rank 3 on algo-2 was killed by signal 9 (SIGKILL)"),
    "stopped": (peers.STOPPED, "stopped by SIGTERM at step 10; checkpoint saved", Stopped,
                "algo-2: the job was stopped; the coordinator on algo-1: stopped by SIGTERM at step 10"),
}


@pytest.mark.parametrize("name", FINAL_CASES)
def test_a_follower_ends_as_the_leader_did(leader, name):
    state, reason, raised, expected = FINAL_CASES[name]
    end(leader, state, reason)
    with pytest.raises(raised) as ended:
        follow(leader)
    assert str(ended.value).startswith(expected), str(ended.value)


def test_a_leader_that_goes_silent_is_lost(leader):
    threading.Timer(0.3, leader.close).start()  # no final state: the host is gone
    with pytest.raises(PeerLost) as lost:
        follow(leader, lost_after_sec=0.5)
    assert str(lost.value).startswith("algo-2: the coordinator on algo-1 stopped answering before the job ended")


def test_a_leader_that_is_slow_to_answer_is_given_longer(listening):
    """A port that takes connections and answers nothing in time (a host whose CPUs are all
    busy starting ranks) is not a closed one: the follower waits silent_after_sec for it."""
    started = time.monotonic()
    with pytest.raises(PeerLost) as lost:
        peers.follow("localhost", listening, "algo-2", "the MPI master on algo-1", poll_sec=0.1, lost_after_sec=0.5,
                     silent_after_sec=4)
    assert time.monotonic() - started >= 4
    assert str(lost.value).startswith("algo-2: the MPI master on algo-1 stopped answering before the job ended "
                                      "(for 4 s)")


def test_the_follower_own_failure_ends_the_wait(leader):
    def task_died():
        raise JobError("ps task on algo-2 exited with code 1")

    with pytest.raises(JobError, match="ps task on algo-2 exited with code 1"):
        follow(leader, alive=task_died)


def test_the_leader_waits_for_its_followers_to_read_the_end(leader):
    follower = peers.StatusServer("localhost", 0, JOB)  # alive: its own status port answers
    finished = threading.Event()
    leader.finish(peers.DONE)
    threading.Thread(target=lambda: (leader.wait_until_read(("localhost",), wait_sec=30, follower_port=follower.port),
                                     finished.set())).start()
    time.sleep(1.5)
    assert not finished.is_set()  # the final state is still up for the follower
    assert peers.read_status("localhost", leader.port, "localhost") == "done"
    assert finished.wait(10)
    follower.close()


def test_a_final_state_counts_as_read_only_once_the_reader_says_it_got_it(leader):
    """A reader that timed out (a loaded host) closes before the reply arrives; the leader's
    write still succeeds, so only the reader's acknowledgement says it was read."""
    leader.finish(peers.FAILED, "script train.py (rank 1 on algo-2) was killed by signal 9 (SIGKILL)")
    with socket.create_connection(("127.0.0.1", leader.port), timeout=5) as gave_up:
        gave_up.sendall(b"algo-3\n")  # and closes, reading nothing
    assert peers.read_status("localhost", leader.port, "algo-2").startswith("failed script train.py")
    deadline = time.monotonic() + 10
    while "algo-2" not in leader._read_final and time.monotonic() < deadline:
        time.sleep(0.05)
    assert leader._read_final == {"algo-2"}


# A follower's own state -> whether the leader keeps its final state up for it (a follower
# still running or done may yet wait on this host; one that failed or was stopped is ending).
FOLLOWER_NEEDS = {
    "running": (None, True),
    "done, waiting for the job's end": (peers.DONE, True),
    "failed itself": (peers.FAILED, False),
    "stopped itself": (peers.STOPPED, False),
}


@pytest.mark.parametrize("name", FOLLOWER_NEEDS)
def test_the_leader_waits_only_for_followers_that_may_need_its_end(leader, name):
    state, waited = FOLLOWER_NEEDS[name]
    follower = status_port(state, "its own reason")
    leader.finish(peers.FAILED, "rank 3 on algo-1 was killed by signal 9 (SIGKILL)")
    started = time.monotonic()
    leader.wait_until_read(("localhost",), wait_sec=3, follower_port=follower.port)
    assert (time.monotonic() - started >= 3) == waited, name
    follower.close()


@pytest.mark.parametrize("follower, port", [("localhost", closed_port), (UNRESOLVABLE, lambda: 2225)],
                         ids=["its train gone (port closed)", "never there (does not resolve)"])
def test_the_leader_does_not_wait_for_a_follower_that_is_not_there(leader, follower, port):
    started = time.monotonic()
    leader.finish(peers.FAILED, "ps task on algo-2 was killed")
    leader.wait_until_read((follower,), wait_sec=30, follower_port=port())
    assert time.monotonic() - started < 10  # not the 30 s kept for a follower that could still read it


def test_a_leader_without_followers_does_not_wait(leader):
    leader.finish(peers.FAILED, "bad input")
    leader.wait_until_read((), wait_sec=30)  # returns at once
    assert peers.read_status("localhost", leader.port, "algo-2") == "failed bad input"


def status_port(state=None, reason=""):
    """Another host's `train`: its status port, in `state` (None: running)."""
    server = peers.StatusServer("algo-x", 0, JOB)
    if state is not None:
        server.finish(state, reason)
    return server


# The other hosts' states as this host's part has succeeded -> which of them it waits for
# until the end (by name), given 3 s at most.
JOB_END_CASES = {
    "every other host done": ([peers.DONE, peers.DONE], []),
    "one failed, one stopped: their parts have ended too": ([peers.FAILED, peers.STOPPED], []),
    "one gone (its train has exited)": (["gone", peers.DONE], []),
    "one still running until the bound": ([peers.DONE, None], ["localhost"]),
}


@pytest.mark.parametrize("name", JOB_END_CASES)
def test_a_host_whose_part_succeeded_waits_for_the_others_to_end(name, caplog):
    caplog.set_level(logging.INFO, logger="trainer")
    states, still_running = JOB_END_CASES[name]
    servers = [status_port(state if state != "gone" else None) for state in states]
    if "gone" in states:
        servers[states.index("gone")].close()
    others = [PeerWait(host, server.port, "train") for host, server in zip(("127.0.0.1", "localhost"), servers)]
    started = time.monotonic()
    assert peers.wait_for_the_job_end("algo-1", others, timeout_sec=3, poll_sec=0.2) == still_running
    seconds = time.monotonic() - started
    if still_running:
        assert 3 <= seconds < 3 + 5  # the bound, plus 5 s for the last polls on a loaded machine
        assert ("localhost did not end its part within 3 s (peer_wait_sec): this host ends anyway, its own part "
                "having succeeded; see localhost's log") in caplog.text
    else:
        assert seconds < 3 and "every host's part has ended" in caplog.text
    for server in servers:
        server.close()


def test_the_wait_for_the_job_end_lasts_until_the_last_host_ends(caplog):
    caplog.set_level(logging.INFO, logger="trainer")
    slow = status_port()
    threading.Timer(1.0, slow.finish, (peers.DONE,)).start()
    started = time.monotonic()
    assert peers.wait_for_the_job_end("algo-1", [PeerWait("localhost", slow.port, "train")], timeout_sec=30,
                                      poll_sec=0.1, log_every_sec=0.4) == []
    assert 1.0 <= time.monotonic() - started < 5
    assert re.search(r"still waiting after \d+ s of 30 s for localhost to end", caplog.text)
    slow.close()


# The job's hosts and what their names resolve to -> which connecting addresses the status
# port answers.
ADMISSION_CASES = {
    "a job host's address": ({"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"}, "10.0.0.2", True),
    "an address no job host resolves to": ({"algo-1": "10.0.0.1", "algo-2": "10.0.0.2"}, "10.0.0.9", False),
    "a host that does not resolve admits nobody": ({"algo-1": "10.0.0.1", "algo-2": None}, "10.0.0.2", False),
    "loopback is not a job host": ({"algo-1": "10.0.0.1"}, "127.0.0.1", False),
}


@pytest.mark.parametrize("name", ADMISSION_CASES)
def test_only_the_job_hosts_addresses_are_admitted(name):
    table, address, admitted = ADMISSION_CASES[name]
    assert peers.JobAddresses(table, resolver=table.get).admits(address) is admitted


def test_a_host_that_resolves_late_is_admitted_once_it_does():
    table = {"algo-1": "10.0.0.1", "algo-2": None}
    job = peers.JobAddresses(table, resolver=table.get)
    job.REFRESH_SEC = 0.1
    assert not job.admits("10.0.0.2")
    table["algo-2"] = "10.0.0.2"  # its container started: its name resolves now
    time.sleep(0.2)
    assert job.admits("10.0.0.2")


def ask_from(source: str, port: int, line: str) -> str:
    """What the status port on 127.0.0.1 says to a connection from `source` (another
    loopback address: Linux routes all of 127/8 to this machine)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(source, 0)) as connection:
        connection.sendall((line + "\n").encode())
        return connection.makefile("rb").readline(4096).decode().strip()


def test_the_status_port_answers_only_the_job_hosts(caplog):
    table = {"algo-1": "127.0.0.1", "algo-2": "127.0.0.2"}
    server = peers.StatusServer("algo-1", 0, peers.JobAddresses(table, resolver=table.get), bind="127.0.0.1")
    server.publish("ssh-user-key", "ssh-ed25519 AAAA")
    try:
        assert ask_from("127.0.0.2", server.port, "algo-2") == "running"
        assert ask_from("127.0.0.2", server.port, "algo-2 ssh-user-key") == "ssh-ed25519 AAAA"
        # Not one of the job's hosts: closed unanswered, whatever it says it is; a
        # final state it claims to have read does not count for the leader's wait.
        assert ask_from("127.0.0.3", server.port, "algo-2") == ""
        assert ask_from("127.0.0.3", server.port, "algo-2 ssh-user-key") == ""
        server.finish(peers.DONE)
        ask_from("127.0.0.3", server.port, "algo-2")
        assert "algo-2" not in server._read_final
        assert "status port: refused 127.0.0.3, not one of the job's hosts (algo-1, algo-2)" in caplog.text
    finally:
        server.close()


def test_a_name_that_resolved_keeps_its_address_when_dns_stops_answering(monkeypatch):
    """A job network's DNS can stop answering for seconds; a host that resolved before is
    still reached (and so is not taken for gone, nor for a lost leader)."""
    server = status_port()
    real = socket.getaddrinfo
    monkeypatch.setattr(addresses, "_resolved", {})
    try:
        assert peers.read_status("localhost", server.port, "algo-2") == "running"

        def dns_down(host, *args, **kwargs):  # names fail; an address is still taken as itself
            if host.replace(".", "").isdigit():
                return real(host, *args, **kwargs)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

        monkeypatch.setattr(socket, "getaddrinfo", dns_down)
        assert peers.read_status("localhost", server.port, "algo-2") == "running"
        assert addresses.address_of("algo-9") is None  # a name never resolved stays unknown
    finally:
        monkeypatch.setattr(socket, "getaddrinfo", real)
        server.close()


def test_a_host_whose_part_failed_ends_the_wait_for_its_sshd_at_once(leader):
    """Waiting for another host's sshd (or its tasks): when that host's `train` says its part
    failed, the wait ends at once with its reason, not after peer_wait_sec."""
    leader.finish(peers.FAILED, "algo-1: cannot start sshd, which MPI across hosts needs")
    started = time.monotonic()
    with pytest.raises(PeerLost) as lost:
        peers.wait_for([PeerWait("localhost", closed_port(), "sshd")], timeout_sec=60, poll_sec=0.1, me="algo-2",
                       status_port=leader.port)
    assert time.monotonic() - started < 10
    assert str(lost.value) == "localhost failed: algo-1: cannot start sshd, which MPI across hosts needs"


def test_a_host_still_running_is_waited_for(leader):
    with pytest.raises(JobError, match="localhost's sshd never answered"):
        peers.wait_for([PeerWait("localhost", closed_port(), "sshd")], timeout_sec=1, poll_sec=0.1, me="algo-2",
                       status_port=leader.port)


def test_the_leader_does_not_wait_for_a_follower_whose_failure_it_has_read(leader):
    """Each host of a failed job waits for the others to read its reason; a host whose own
    failure this one has read (before its port went silent) is not waited for."""
    follower = status_port(peers.FAILED, "algo-2: the MPI master on algo-1 failed")
    port = follower.port
    assert peers.read_status("localhost", port, "algo-1").startswith("failed")
    follower.close()
    # Its container gone: the address no longer refuses, it only stays silent (here: a port
    # that takes connections and answers nothing).
    silent = socket.create_server(("127.0.0.1", port))
    try:
        leader.finish(peers.FAILED, "rank 2 on algo-2 was killed by signal 9 (SIGKILL)")
        started = time.monotonic()
        leader.wait_until_read(("localhost",), wait_sec=30, follower_port=port)
        assert time.monotonic() - started < 3
    finally:
        silent.close()

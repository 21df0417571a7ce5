"""The job's other hosts: wait for them before multi-host work, and learn how the leader ended.

Before: a host waits until every host it needs resolves and answers (another host's
`train` on its status port, a parameter-server task on its port, sshd), for at most
`peer_wait_sec`, logging which are still missing every LOG_EVERY_SEC, and then fails with
a reason that names them and how long it tried. SageMaker's training toolkit waits for DNS
for up to 15 minutes without a word, and for sshd without a bound; a job whose peer never
comes must end sooner and say which one.

After: every host publishes how its part went on its status port: running, done, stopped
or failed with its reason. In modes where one host's end is the job's end (the
parameter-server coordinator's, the MPI master's) the other hosts follow it and so tell a
leader that finished from one that was lost (its port stops answering before a final
state). A host whose part succeeded waits, bounded, for every other host's part to end
before it exits: the job's hosts end together (wait_for_the_job_end).
"""
from __future__ import annotations

import errno
import logging
import socket
import socketserver
import threading
import time
from typing import Callable

from trainer.contract.addresses import LOOKUP_TIMEOUT_SEC, address_of
from trainer.errors import JobError, PeerLost, Stopped
from trainer.plan.types import STATUS_PORT, PeerWait  # what the plan says to wait for

log = logging.getLogger("trainer")

LOG_EVERY_SEC = 10.0
CONNECT_TIMEOUT_SEC = 2.0
# Reading another host's status: long enough for the kernel to say that an address is gone
# (no route to host, after 3 s of unanswered ARP), not only that it is slow.
STATUS_CONNECT_TIMEOUT_SEC = 5.0
CHECK_TIMEOUT_SEC = 10.0  # one check of one peer (a lookup, then a connect or a login)
# A leader whose status port is closed (its `train` has exited, or its host is gone) for
# this long is lost; a single missed poll is not.
LOST_AFTER_SEC = 10.0
# A status port that is open but does not answer in time belongs to a host that may only be
# overloaded (ranks starting on every core): it is lost after this long.
SILENT_AFTER_SEC = 60.0
# How long a leader keeps its final state up for the followers that have not read it yet.
FINAL_STATE_WAIT_SEC = 30.0
# A host whose `train` port is closed on this many polls in a row has ended (exited).
GONE_AFTER_POLLS = 2
# What a reader sends back once it has read a final state (StatusServer.wait_until_read).
READ_ACK = b"read"

RUNNING, DONE, STOPPED, FAILED = "running", "done", "stopped", "failed"
# The fact a host publishes once its script has ended while the host still serves (a
# parameter-server worker host's PS task): "exit code 0".
SCRIPT_ENDED = "script-ended"
FINAL_STATES = (DONE, STOPPED, FAILED)
UNRESOLVED = "does not resolve"


# The final states this host has read on other hosts' status ports, by (host, port): a host
# known to have failed or stopped needs nothing more of this one (StatusServer.wait_until_read).
_final_read: dict[tuple[str, int], str] = {}


def port_answers(address: str, port: int, timeout: float = CONNECT_TIMEOUT_SEC) -> bool:
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return True
    except OSError:
        return False


def _check(peer: PeerWait, answers: Callable[[PeerWait, str], bool]) -> str | None:
    """None when the peer answers, else what is missing ("does not resolve", ...)."""
    address = address_of(peer.host)
    if address is None:
        return UNRESOLVED
    if not answers(peer, address):
        return f"resolves to {address}, no answer on port {peer.port}"
    return None


def tcp_answers(peer: PeerWait, address: str) -> bool:
    return port_answers(address, peer.port)


def describe_missing(missing: dict[PeerWait, str]) -> str:
    """"algo-2 (does not resolve); algo-3's ps task (resolves to ...)", each problem once."""
    texts = [f"{peer.host} ({problem})" if problem == UNRESOLVED else f"{peer.host}'s {peer.what} ({problem})"
             for peer, problem in missing.items()]
    return "; ".join(dict.fromkeys(texts))


def _at_once(function: Callable, peers: list[PeerWait], timeout: float, late) -> dict:
    """function(peer) for every peer at once, each in a daemon thread: one that hangs (a
    connect to an address that drops packets) neither delays the others beyond `timeout`
    nor keeps the process from ending; its result is then `late`."""
    results: dict = {}

    def call(peer):
        results[peer] = function(peer)

    threads = [threading.Thread(target=call, args=(peer,), daemon=True) for peer in peers]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return {peer: results.get(peer, late) for peer in peers}


def check_all(peers: list[PeerWait], answers: Callable[[PeerWait, str], bool],
              timeout: float = CHECK_TIMEOUT_SEC) -> dict[PeerWait, str | None]:
    """Every peer checked at once: None for each that answers, else what is missing."""
    return _at_once(lambda peer: _check(peer, answers), peers, timeout, f"no answer within {timeout:.0f} s")


def wait_for(peers: list[PeerWait], timeout_sec: float, answers: Callable[[PeerWait, str], bool] = tcp_answers,
             poll_sec: float = 1.0, log_every_sec: float = LOG_EVERY_SEC, clock=time.monotonic, me: str = "",
             status_port: int = STATUS_PORT) -> None:
    """Return once every peer resolves and answers; else raise JobError after `timeout_sec`,
    naming the ones that never did. A host still missing whose `train` has published that
    its part failed or was stopped (`me` reads its status port) ends the wait at once, with
    its reason: what this host waits for there (its sshd, its tasks) will never come. The
    waits between rounds are interruptible (a SIGTERM handler that raises ends them at once)."""
    if not peers:
        return
    started = last_log = clock()
    missing = {peer: "not checked yet" for peer in peers}
    log.info("waiting for the job's other hosts (at most %.0f s, peer_wait_sec): %s", timeout_sec,
             ", ".join(f"{p.host}'s {p.what}" for p in peers))
    while True:
        for peer, problem in check_all(list(missing), answers).items():
            if problem is None:
                del missing[peer]
            else:
                missing[peer] = problem
        if me:
            _raise_if_one_ended(sorted({peer.host for peer in missing}), me, status_port)
        elapsed = clock() - started
        if not missing:
            log.info("every host answered after %.0f s", elapsed)
            return
        if elapsed >= timeout_sec:
            raise JobError(_never_answered(missing, timeout_sec))
        if clock() - last_log >= log_every_sec:
            last_log = clock()
            log.warning("still waiting after %.0f s of %.0f s for %d of %d: %s", elapsed, timeout_sec,
                        len(missing), len(peers), describe_missing(missing))
        time.sleep(poll_sec)


def _raise_if_one_ended(hosts: list[str], me: str, port: int) -> None:
    """PeerLost naming the first of `hosts` whose part has failed or stopped, with its reason."""
    states = _at_once(lambda host: read_status(host, port, me), hosts, CHECK_TIMEOUT_SEC, None)
    for host, status in states.items():
        if is_final(status) and not status.startswith(DONE):
            state, _, reason = status.partition(" ")
            reason = reason.removeprefix(f"{host}: ")  # a host's own reason often starts with its name
            raise PeerLost(f"{host} {state}: {reason}" if reason else f"{host} {state}")


def _never_answered(missing: dict[PeerWait, str], timeout_sec: float) -> str:
    # Names the bound the user set, not the elapsed time: the last round of checks may end a
    # fraction past it, and "tried for 16 s" with peer_wait_sec=15 reads as a different setting.
    unresolved = list(dict.fromkeys(p.host for p, problem in missing.items() if problem == UNRESOLVED))
    silent = [p for p, problem in missing.items() if problem != UNRESOLVED]
    parts = [f"host {host} never resolved" for host in unresolved]
    parts += [f"{p.host}'s {p.what} never answered on port {p.port}" for p in silent]
    hints = []
    if unresolved:
        hints.append("a host that does not resolve never started, or the job's network gives no DNS name to it")
    if silent:
        hints.append("one that resolves but does not answer has not started its part or failed first (see its log)")
    return f"{'; '.join(parts)} (tried for {timeout_sec:.0f} s, peer_wait_sec): {'; '.join(hints)}"


_serving: list = []


class JobAddresses:
    """Who may talk to this host's status port: the addresses the job's host names resolve
    to. A host that resolved late (its container started after this one) is looked up again
    when an unknown address connects, at most once every REFRESH_SEC."""

    REFRESH_SEC = 1.0

    def __init__(self, hosts, resolver=None):
        self.hosts = tuple(hosts)
        self._resolve = resolver or address_of
        self._known: set[str] = set()
        self._refreshed = -self.REFRESH_SEC
        self._lock = threading.Lock()

    def admits(self, address: str) -> bool:
        if address in self._known:
            return True
        with self._lock:
            if time.monotonic() - self._refreshed >= self.REFRESH_SEC:
                self._refreshed = time.monotonic()
                looked_up = _at_once(lambda host: self._resolve(host), list(self.hosts), LOOKUP_TIMEOUT_SEC, None)
                self._known |= {found for found in looked_up.values() if found}
        return address in self._known


def own_address(host_name: str) -> str:
    """The address to bind this host's servers to: the one its job host name resolves to (the
    job's network interface), when it is this machine's; else every address ("")."""
    address = address_of(host_name)
    if address is None:
        return ""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind((address, 0))
    except OSError:  # the name resolves elsewhere (a proxy, a stale entry): listen everywhere
        return ""
    return address


class StatusServer:
    """This host's status port. A connection sends one line: its own host name, and gets
    one line back: the state, and for a final state other than done, its reason (which the
    reader acknowledges with a line "read": only then has it read it). A line
    of its host name and a fact's name ("algo-2 ssh-host-key") gets that fact instead (an
    empty line while it is not published yet).

    Only the job's hosts are answered: a connection from any other address is closed
    unanswered, and logged once per address. What a host reads here decides whether it goes
    on, ends or trusts a key (trainer.launch.ssh_trust), so nobody else may write to it or
    read from it."""

    def __init__(self, host_name: str, port: int, job_hosts, bind: str | None = None):
        self.host_name = host_name
        self.port = port
        self._state = RUNNING
        self._facts: dict[str, str] = {}
        self._final = threading.Event()
        self._read_final: set[str] = set()
        self._changed = threading.Condition()
        self._job = job_hosts if isinstance(job_hosts, JobAddresses) else JobAddresses(job_hosts)
        self._refused: set[str] = set()
        server = self

        class Handler(socketserver.StreamRequestHandler):
            timeout = CONNECT_TIMEOUT_SEC

            def handle(self):
                try:
                    if not server._admits(self.client_address[0]):
                        return
                    words = self.rfile.readline(256).decode(errors="replace").split()
                    reader, fact = (words + ["", ""])[:2]
                    with server._changed:
                        if fact:
                            self.wfile.write((server._facts.get(fact, "") + "\n").encode())
                            return
                        state, final = server._state, server._final.is_set()
                    self.wfile.write((state + "\n").encode())
                    # A final state counts as read once the reader says it got it: a write
                    # succeeds into a connection whose reader had already timed out.
                    if final and reader and self.rfile.readline(16).strip() == READ_ACK:
                        with server._changed:
                            server._read_final.add(reader)
                            server._changed.notify_all()
                except OSError:
                    pass

        socketserver.ThreadingTCPServer.allow_reuse_address = True
        self.address = own_address(host_name) if bind is None else bind
        self._server = socketserver.ThreadingTCPServer((self.address, port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]  # the one bound, when asked for port 0
        _serving.append(self)  # held until the process ends (finish leaves the port open)
        threading.Thread(target=self._server.serve_forever, daemon=True, name="status-port").start()

    def _admits(self, address: str) -> bool:
        if self._job.admits(address):
            return True
        if address not in self._refused:
            self._refused.add(address)
            log.warning("status port: refused %s, not one of the job's hosts (%s)", address,
                        ", ".join(self._job.hosts))
        return False

    def publish(self, fact: str, value: str) -> None:
        """Serve `value` (one line) to the job's hosts that ask for `fact`."""
        with self._changed:
            self._facts[fact] = value.replace("\n", " ").strip()

    def finish(self, state: str, reason: str = "") -> None:
        """Publish the final state. The port stays open until this process ends: a follower
        takes its closing as the leader's process being gone (a parameter-server
        coordinator still talks to the followers' tasks while TensorFlow shuts down)."""
        with self._changed:
            self._state = f"{state} {reason}".strip().replace("\n", " ")
            self._final.set()

    def wait_until_read(self, followers, wait_sec: float = FINAL_STATE_WAIT_SEC,
                        follower_port: int | None = None) -> None:
        """Return once every host of `followers` has read this host's final state or no
        longer needs it, or after `wait_sec`. A follower no longer needs it when its `train`
        is gone (its status port closed), never was there (its name does not resolve), or
        has itself failed or been stopped (it is ending, and waits for nobody's end)."""
        deadline = time.monotonic() + wait_sec
        settled: set[str] = set()
        while True:
            with self._changed:
                pending = set(followers) - self._read_final - settled
            settled |= {host for host in pending if self._needs_nothing(host, follower_port or self.port)}
            with self._changed:
                if not set(followers) - self._read_final - settled or time.monotonic() >= deadline:
                    break
                self._changed.wait(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
        unread = sorted(set(followers) - self._read_final - settled)
        if unread:
            log.warning("%s did not read how this host ended within %.0f s", ", ".join(unread), wait_sec)

    @property
    def other_hosts(self) -> tuple[str, ...]:
        """The job's hosts but this one: the hosts that may read its final state."""
        return tuple(host for host in self._job.hosts if host != self.host_name)

    def _needs_nothing(self, host: str, port: int) -> bool:
        # A failure or stop read from it before counts: its port may be gone by now, silently.
        if _ended_apart(_final_read.get((host, port))) or address_of(host) is None:
            return True
        status, closed = poll_status(host, port, self.host_name)
        return closed or _ended_apart(status)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def read_status(host: str, port: int, me: str) -> str | None:
    """The state `host` publishes, or None when it does not answer."""
    return _ask(host, port, me)[0]


def poll_status(host: str, port: int, me: str) -> tuple[str | None, bool]:
    """(the state `host` publishes or None, and whether its port is certainly closed:
    refused, or its address unreachable). A port that is slow to answer is not closed."""
    return _ask(host, port, me)


def read_fact(host: str, port: int, me: str, fact: str) -> str | None:
    """A fact `host` publishes (trainer.launch.ssh_trust's keys): None while it does not
    answer or has not published it yet."""
    return _ask(host, port, f"{me} {fact}")[0]


CLOSED_ERRNOS = (errno.ECONNREFUSED, errno.EHOSTUNREACH, errno.ENETUNREACH)


def _ask(host: str, port: int, line: str) -> tuple[str | None, bool]:
    """(the one-line reply or None, and whether the port is certainly closed)."""
    address = address_of(host)
    if address is None:
        return None, False
    try:
        with socket.create_connection((address, port), timeout=STATUS_CONNECT_TIMEOUT_SEC) as connection:
            connection.settimeout(CONNECT_TIMEOUT_SEC)
            connection.sendall((line + "\n").encode())
            reply = connection.makefile("rb").readline(4096).decode(errors="replace").strip()
            if is_final(reply):
                _final_read[(host, port)] = reply
                try:
                    connection.sendall(READ_ACK + b"\n")
                except OSError:
                    pass  # read all the same; the host waits for the ack a bounded time
            return reply or None, False
    except OSError as err:
        return None, err.errno in CLOSED_ERRNOS


def is_final(status: str | None) -> bool:
    return status is not None and status.partition(" ")[0] in FINAL_STATES


def _ended_apart(status: str | None) -> bool:
    """A final state other than done: a host that failed or was stopped waits for nobody."""
    return is_final(status) and not status.startswith(DONE)


class _WatchOver(Exception):
    """A follow's `alive` check, once its follower has stopped watching."""


def follow_until(done: threading.Event, host: str, me: str, who: str) -> bool:
    """Follow `host`'s `train` (follow, naming it `who`) until it publishes done (True) or
    this host's own part ends first, `done` set (False); raise as follow does."""
    def still_watching():
        if done.is_set():
            raise _WatchOver()

    try:
        follow(host, STATUS_PORT, me, who, alive=still_watching)
        return True
    except _WatchOver:
        return False


def follow(leader: str, port: int, me: str, who: str, alive: Callable[[], None] = lambda: None,
           poll_sec: float = 1.0, lost_after_sec: float = LOST_AFTER_SEC, silent_after_sec: float = SILENT_AFTER_SEC,
           clock=time.monotonic) -> None:
    """Wait until `leader` (named `who` in reasons: "the coordinator on algo-1") has
    published a final state: return on done; raise Stopped or PeerLost naming it otherwise,
    or when its port stays closed for `lost_after_sec` (or open and silent for
    `silent_after_sec`) before a final state. A leader publishes its state once its part is
    over: it no longer needs this host's processes. `alive()` is called each poll and raises
    when something of this host's own has failed."""
    silent_since = closed_since = None
    while True:
        alive()
        status, closed = poll_status(leader, port, me)
        if is_final(status):
            break
        now = clock()
        silent_since = None if status is not None else silent_since if silent_since is not None else now
        closed_since = None if not closed else closed_since if closed_since is not None else now
        for since, limit in ((closed_since, lost_after_sec), (silent_since, silent_after_sec)):
            if since is not None and now - since >= limit:
                raise PeerLost(f"{me}: {who} stopped answering before the job ended (for {limit:.0f} s): its "
                               "host failed or was lost; see its log")
        time.sleep(poll_sec)
    state, _, reason = status.partition(" ")
    if state == STOPPED:
        raise Stopped(f"{me}: the job was stopped; {who}: {reason}")
    if state == FAILED:
        raise PeerLost(f"{me}: {who} failed: {reason}")


def serving() -> StatusServer | None:
    """This process's status port, if it has one (one per `train`, up until it ends)."""
    return _serving[-1] if _serving else None


def wait_for_the_others_to_end(status: StatusServer, timeout_sec: float, setting: str = "peer_wait_sec") -> list[str]:
    """wait_for_the_job_end for every other host of the job `status` serves (their `train`)."""
    others = [PeerWait(host, STATUS_PORT, "train") for host in status.other_hosts]
    return wait_for_the_job_end(status.host_name, others, timeout_sec, setting=setting)


def wait_for_the_job_end(me: str, others: list[PeerWait], timeout_sec: float, poll_sec: float = 1.0,
                         log_every_sec: float = LOG_EVERY_SEC, clock=time.monotonic,
                         setting: str = "peer_wait_sec") -> list[str]:
    """After this host's part has succeeded: return once every other host's part has ended
    too (its state is final, or its `train` has gone), or after `timeout_sec`, naming then
    the hosts still running. Meanwhile this host's status port keeps saying "done".

    The job's hosts end together: SageMaker bills each instance until the whole job ends,
    so waiting costs nothing there, and where the first container to exit stops the others
    (the SDK's local mode runs `docker-compose up --abort-on-container-exit`) no host is
    stopped in the middle of its own saving. Returns the hosts that had not ended."""
    running = {peer.host: peer for peer in others}
    silent = {host: 0 for host in running}
    started = last_log = clock()
    if running:
        log.info("this host's part has ended; waiting for %s to end theirs (at most %.0f s, %s)",
                 ", ".join(running), timeout_sec, setting)
    while running:
        states = _at_once(lambda peer: poll_status(peer.host, peer.port, me), list(running.values()),
                          CHECK_TIMEOUT_SEC, (None, False))
        for peer, (status, closed) in states.items():
            # Only a closed port says a host's `train` has exited; a slow one may be busy.
            silent[peer.host] = silent[peer.host] + 1 if closed else 0
            if is_final(status) or silent[peer.host] >= GONE_AFTER_POLLS:
                del running[peer.host]
        elapsed = clock() - started
        if not running:
            log.info("every host's part has ended (waited %.0f s)", elapsed)
            break
        if elapsed >= timeout_sec:
            log.warning("%s did not end its part within %.0f s (%s): this host ends anyway, its own "
                        "part having succeeded; see %s's log", ", ".join(running), timeout_sec, setting,
                        " and ".join(running))
            break
        if clock() - last_log >= log_every_sec:
            last_log = clock()
            log.info("still waiting after %.0f s of %.0f s for %s to end", elapsed, timeout_sec, ", ".join(running))
        time.sleep(poll_sec)
    return sorted(running)

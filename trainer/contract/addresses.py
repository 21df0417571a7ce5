"""The job's hosts' addresses, from their names.

A job host's address does not change while the job runs: once a name has resolved, that
address is used from then on (address_of). The job network's DNS can stop answering for
seconds at a time (seen in container networks under load); a host must not take that for
another host's end, and a host that has exited is told by its port, not by its name.

TensorFlow's gRPC channels look a peer's name up again whenever they reconnect, so a
moment when the job's DNS does not answer (SageMaker's first minute; a container
network's DNS server reloading while another container starts) fails that call. The
parameter-server coordinator takes a worker whose call failed so for a preempted one and
waits for it to come back (seen: a two-host job whose worker's
name failed to resolve once made no progress after it). So the container's own processes
look each name of their TensorFlow cluster up once, with retries, and give TensorFlow the
addresses (with_addresses). A script's TF_CONFIG keeps the names, as AWS's container writes it.
"""
from __future__ import annotations

import logging
import socket
import threading
import time

from trainer.errors import JobError

log = logging.getLogger(__name__)
LOOKUP_TIMEOUT_SEC = 5.0  # one lookup; a host that does not resolve in this is tried again
ADDRESS_WAIT_SEC = 120.0  # SageMaker's DNS may not know the other hosts in the job's first minute
RETRY_SEC = 1.0
_resolved: dict[str, str] = {}  # host -> address, once found


def address_of(host: str, timeout: float = LOOKUP_TIMEOUT_SEC) -> str | None:
    """The host's address, or None while it does not resolve. The lookup runs in a thread
    of its own, so a resolver that does not answer cannot hold this process (or its SIGTERM
    handler) longer than `timeout`."""
    if host in _resolved:
        return _resolved[host]
    result: list = []

    def lookup():
        try:
            result.append(socket.getaddrinfo(host, None, socket.AF_INET, socket.SOCK_STREAM)[0][4][0])
        except OSError:
            pass

    thread = threading.Thread(target=lookup, daemon=True)
    thread.start()
    thread.join(timeout)
    if result:
        _resolved[host] = result[0]
    return result[0] if result else None


def with_addresses(tf_config: dict, timeout_sec: float = ADDRESS_WAIT_SEC) -> dict:
    """`tf_config` with each `host:port` of its cluster as `address:port`."""
    deadline = time.monotonic() + timeout_sec
    found: dict[str, str] = {}

    def address(entry: str) -> str:
        host, _, port = entry.rpartition(":")
        if host not in found:
            found[host] = address_within(host, deadline, timeout_sec)
        return f"{found[host]}:{port}"

    cluster = {job: [address(entry) for entry in entries] for job, entries in tf_config["cluster"].items()}
    log.debug("cluster addresses: %s", found)
    return {**tf_config, "cluster": cluster}


def address_within(host: str, deadline: float, timeout_sec: float) -> str:
    """The IPv4 address of `host`, asked again every second until `deadline` (`timeout_sec`
    after the first host's first try)."""
    while True:
        address = address_of(host)  # once found, kept for the job (the status port's too)
        if address is not None:
            return address
        if time.monotonic() >= deadline:
            raise JobError(f"host '{host}' of this job has no address: its name does not resolve, "
                           f"tried for {timeout_sec:.0f} s")
        time.sleep(RETRY_SEC)

"""A TensorFlow cluster's host names, resolved once, when the process starts.

TensorFlow's gRPC channels look a peer's name up again whenever they reconnect, so a
moment when the job's DNS does not answer (SageMaker's first minute; a container
network's DNS server reloading while another container starts) fails that call. The
parameter-server coordinator takes a worker whose call failed so for a preempted one and
waits for it to come back (seen: a two-host job whose worker's
name failed to resolve once made no progress after it). The addresses of a job's hosts do not
change while it runs, so the container's own processes look each name up once, with
retries, and give TensorFlow the addresses. A script's TF_CONFIG keeps the names, as
AWS's container writes it.
"""
from __future__ import annotations

import logging
import time

from trainer.errors import JobError
from trainer.launch import peers

log = logging.getLogger(__name__)
RESOLVE_TIMEOUT_SEC = 120.0  # SageMaker's DNS may not know the other hosts in the job's first minute
RETRY_SEC = 1.0


def with_addresses(tf_config: dict, timeout_sec: float = RESOLVE_TIMEOUT_SEC) -> dict:
    """`tf_config` with each `host:port` of its cluster as `address:port`."""
    deadline = time.monotonic() + timeout_sec
    found: dict[str, str] = {}

    def address(entry: str) -> str:
        host, _, port = entry.rpartition(":")
        if host not in found:
            found[host] = resolve(host, deadline, timeout_sec)
        return f"{found[host]}:{port}"

    cluster = {job: [address(entry) for entry in entries] for job, entries in tf_config["cluster"].items()}
    log.debug("cluster addresses: %s", found)
    return {**tf_config, "cluster": cluster}


def resolve(host: str, deadline: float, timeout_sec: float) -> str:
    """The IPv4 address of `host`, asked again every second until `deadline` (`timeout_sec`
    after the first host's first try)."""
    while True:
        address = peers.resolve(host)  # once found, kept for the job (the status port's too)
        if address is not None:
            return address
        if time.monotonic() >= deadline:
            raise JobError(f"host '{host}' of this job has no address: its name does not resolve, "
                           f"tried for {timeout_sec:.0f} s")
        time.sleep(RETRY_SEC)

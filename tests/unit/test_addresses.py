"""The container's own TensorFlow clusters get addresses, looked up once (trainer.contract.addresses)."""
import socket
import time

import pytest

from trainer.errors import JobError
from trainer.contract import addresses
from trainer.plan.clusters import ps_cluster


def test_every_host_of_the_cluster_becomes_its_address_and_the_task_stays():
    tf_config = {"cluster": ps_cluster(["localhost", "127.0.0.1"]), "task": {"type": "chief", "index": 0}}
    resolved = addresses.with_addresses(tf_config)
    assert resolved["task"] == tf_config["task"]
    assert resolved["cluster"] == {"chief": ["127.0.0.1:2222"], "ps": ["127.0.0.1:2223", "127.0.0.1:2223"],
                                   "worker": ["127.0.0.1:2224", "127.0.0.1:2224"]}
    assert tf_config["cluster"]["chief"] == ["localhost:2222"]  # the plan's own stays as it was


def test_a_name_that_never_resolves_fails_naming_the_host():
    started = time.monotonic()
    with pytest.raises(JobError, match=r"host 'algo-9\.invalid' of this job has no address.*tried for 2 s"):
        addresses.with_addresses({"cluster": {"worker": ["localhost:1", "algo-9.invalid:8890"]}}, timeout_sec=2)
    assert time.monotonic() - started < 10


def test_a_name_that_fails_for_a_moment_is_asked_again(monkeypatch):
    """A DNS server that does not answer for a moment (a reload) cannot be made here for
    real: the lookup fails twice, as getaddrinfo does then, before answering."""
    real, failures = socket.getaddrinfo, []

    def flaky(host, *args, **kwargs):
        if host == "algo-2" and len(failures) < 2:
            failures.append(host)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real("127.0.0.1" if host == "algo-2" else host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", flaky)
    monkeypatch.setattr(addresses, "_resolved", {})
    monkeypatch.setattr(addresses, "RETRY_SEC", 0.01)
    assert addresses.with_addresses({"cluster": {"worker": ["algo-2:8890"]}})["cluster"] == {"worker": ["127.0.0.1:8890"]}
    assert failures == ["algo-2", "algo-2"]

"""Several hosts on one machine: a network namespace per host, joined by a bridge.

Each namespace has its own ports, so every simulated host uses SageMaker's fixed ports
(2222, 2223, 8890, ...) as it would in the cloud, and sees the others by their SageMaker
names (algo-1, algo-2, ...) through its own /etc/hosts (`ip netns exec` bind-mounts
/etc/netns/<namespace>/hosts). The addresses exist only inside these namespaces. Each
host also has a host name of its own (a UTS namespace): MPI tells its nodes apart by
name. Needs root, iproute2 and util-linux's unshare; used by `trainer local --hosts N`,
never inside the image.
"""
from __future__ import annotations

import os
import shutil
import subprocess

from trainer.errors import JobError

SUBNET = "10.234.0"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class HostNamespaces:
    def __init__(self, hosts: list[str]):
        self.hosts = hosts
        tag = f"tr{os.getpid() % 100000}"
        self.switch = f"{tag}sw"
        self.namespaces = {host: f"{tag}h{index}" for index, host in enumerate(hosts)}
        self.addresses = {host: f"{SUBNET}.{index + 1}" for index, host in enumerate(hosts)}

    def __enter__(self) -> "HostNamespaces":
        if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("unshare") is None:
            raise JobError("several hosts on one machine need network namespaces: run as root with iproute2 "
                           "and util-linux")
        try:
            self._create()
        except subprocess.CalledProcessError as err:
            self.__exit__(None, None, None)
            raise JobError(f"cannot create network namespaces: {' '.join(err.cmd)}: {err.stderr.strip()}") from err
        return self

    def _create(self) -> None:
        _ip("netns", "add", self.switch)
        _ip("-n", self.switch, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.switch, "link", "set", "br0", "up")
        hosts_file = "127.0.0.1 localhost\n" + "".join(
            f"{address} {host}\n" for host, address in self.addresses.items())
        for index, (host, namespace) in enumerate(self.namespaces.items()):
            _ip("netns", "add", namespace)
            port = f"{self.switch}p{index}"
            _ip("link", "add", port, "netns", self.switch, "type", "veth", "peer", "name", "eth0",
                "netns", namespace)
            _ip("-n", self.switch, "link", "set", port, "master", "br0", "up")
            _ip("-n", namespace, "addr", "add", f"{self.addresses[host]}/24", "dev", "eth0")
            _ip("-n", namespace, "link", "set", "eth0", "up")
            _ip("-n", namespace, "link", "set", "lo", "up")
            os.makedirs(f"/etc/netns/{namespace}", exist_ok=True)
            with open(f"/etc/netns/{namespace}/hosts", "w") as f:
                f.write(hosts_file)

    def __exit__(self, *exc) -> None:
        for namespace in [*self.namespaces.values(), self.switch]:
            subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
            shutil.rmtree(f"/etc/netns/{namespace}", ignore_errors=True)

    def command(self, host: str, argv: list[str]) -> list[str]:
        """`argv` run on `host`, named `host`."""
        return ["ip", "netns", "exec", self.namespaces[host], "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host, *argv]

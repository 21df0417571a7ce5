"""The network interface a job's hosts talk over: the one resourceconfig.json names
(`network_interface_name`, SM_NETWORK_INTERFACE_NAME), or, where this host has no interface
of that name, the one that reaches the other hosts.

SageMaker names `ethwe` on its instances and `eth0` in the SDK's local mode for framework
estimators; ModelTrainer's local mode (SDK 2.x's `sagemaker.modules` and SDK 3.x) names
`ethwe` too, in containers whose only interface is `eth0`. MPI given an interface that does
not exist fails with "None of the TCP networks specified ... could be found".
"""
from __future__ import annotations

import fcntl
import os
import socket
import struct
from dataclasses import dataclass
from typing import Mapping

SIOCGIFADDR = 0x8915  # Linux: an interface's IPv4 address


@dataclass(frozen=True)
class InterfaceChoice:
    name: str  # what MPI is told (btl_tcp_if_include, oob_tcp_if_include) and scripts see
    why: str = ""  # "" where it is the one named; else why another, or why none works
    usable: bool = True  # False: the named one is absent and none other is clearly the job's


def present_interfaces(folder: str = "/sys/class/net") -> dict[str, tuple[str, ...]]:
    """This host's interfaces but loopback, each with its IPv4 address (none: no address)."""
    try:
        names = sorted(name for name in os.listdir(folder) if name != "lo")
    except OSError:
        return {}
    return {name: _ipv4_address(name) for name in names}


def _ipv4_address(name: str) -> tuple[str, ...]:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            answer = fcntl.ioctl(probe.fileno(), SIOCGIFADDR, struct.pack("256s", name[:15].encode()))
        except OSError:
            return ()
    return (socket.inet_ntoa(answer[20:24]),)


def choose_interface(named: str, present: Mapping[str, tuple[str, ...]], own_address: str | None,
                     host: str) -> InterfaceChoice:
    """The interface for `host`'s job traffic. `present`: this host's interfaces (empty: not
    known, the named one is kept); `own_address`: the address the host's job name resolves
    to, which is on the interface the other hosts reach it by."""
    if not present or named in present:
        return InterfaceChoice(named)
    said = f"resourceconfig.json names the network interface {named}, which host {host} does not have"
    holder = next((name for name, addresses in present.items() if own_address and own_address in addresses), None)
    if holder:
        return InterfaceChoice(holder, f"{said}: using {holder}, which holds {host}'s address {own_address}")
    addressed = [name for name, addresses in present.items() if addresses]
    if len(addressed) == 1:
        return InterfaceChoice(addressed[0], f"{said}: using {addressed[0]}, its only one with an address")
    has = ", ".join(f"{name} ({', '.join(addresses) or 'no address'})" for name, addresses in present.items())
    return InterfaceChoice(named, f"{said} (it has {has}), and none of them holds the address its name resolves to "
                                  f"({own_address or 'it does not resolve'})", usable=False)

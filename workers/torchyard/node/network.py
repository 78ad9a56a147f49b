"""This machine's network as its processes see it: its IPv4 addresses (`local_addresses`: the agent
reports them in its capabilities, a node offers them for the job's link measurement) and the network
stack a process runs on (`network_stack`: nodes on one stack have no link between them to measure).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from dataclasses import dataclass

import psutil

from torchyard.protocol import AddressInfo


def network_stack() -> str:
    """This process's network stack: the machine's boot and the network namespace ("" when Linux
    does not say). Nodes on one stack reach each other whatever address they dial, and their bytes
    never leave the machine: there is no link between them to measure, and none to pin their traffic
    to (an interface another program owns, a container bridge, may vanish under a running job)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as handle:
            boot = handle.read().strip()
        namespace = os.stat("/proc/self/ns/net").st_ino
    except OSError:
        return ""
    return f"{boot}/{namespace}"


@dataclass(frozen=True)
class Address:
    """One IPv4 address of this machine, the interface it is on and the network it belongs to."""

    interface: str
    address: str
    network: str  # "10.0.1.0/24"
    speed_mbit: int = 0  # the link speed the kernel reports (0: it does not say, e.g. a veth)

    def to_dict(self) -> AddressInfo:
        return {"interface": self.interface, "address": self.address, "network": self.network,
                "speed_mbit": self.speed_mbit}


def local_addresses() -> list[Address]:
    """This machine's IPv4 addresses on interfaces that are up, loopback and link-local left out."""
    stats = psutil.net_if_stats()
    found = []
    for name, addresses in sorted(psutil.net_if_addrs().items()):
        stat = stats.get(name)
        if stat is None or not stat.isup:
            continue
        for entry in addresses:
            if entry.family != socket.AF_INET or not entry.netmask:
                continue
            interface = ipaddress.ip_interface(f"{entry.address}/{entry.netmask}")
            if interface.ip.is_loopback or interface.ip.is_link_local:
                continue
            found.append(Address(interface=name, address=entry.address, network=str(interface.network),
                                 speed_mbit=int(stat.speed or 0)))
    return found

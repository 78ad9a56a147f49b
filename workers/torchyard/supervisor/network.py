"""Which network interface a node's ranks talk to the others on.

Gloo (and NCCL's bootstrap) advertise the address the hostname resolves to unless told an
interface: on many hosts that is a loopback address (Debian's 127.0.1.1), and a peer on another
machine then dials its own loopback ("Connection refused, remote=[127.0.0.1]"). The interface that
routes to the master's address is the one every rank of the job can reach, so it is set for the
ranks unless the job names one itself.
"""

from __future__ import annotations

import socket

import psutil

# Set for every backend: gloo is used for CPU tensors under nccl jobs too.
GLOO_IFNAME = "GLOO_SOCKET_IFNAME"
NCCL_IFNAME = "NCCL_SOCKET_IFNAME"


def interface_towards(address: str) -> tuple[str, str] | None:
    """(interface name, local address) this host would use to reach `address`, or None when there
    is no route or the name does not resolve. Connecting a UDP socket sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((address, 9))
            local = probe.getsockname()[0]
    except OSError:
        return None
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and a.address == local for a in addresses):
            return name, local
    return None


def interface_env(master_addr: str, backend: str, job_env: dict[str, str]) -> dict[str, str]:
    """The *_SOCKET_IFNAME variables to add for this node (none the job set itself)."""
    found = interface_towards(master_addr)
    return {} if found is None else ifname_env(found[0], backend, job_env)


def ifname_env(interface: str, backend: str, job_env: dict[str, str]) -> dict[str, str]:
    """The *_SOCKET_IFNAME variables naming `interface` that the job did not set itself."""
    names = [GLOO_IFNAME, NCCL_IFNAME] if backend == "nccl" else [GLOO_IFNAME]
    return {name: interface for name in names if name not in job_env}

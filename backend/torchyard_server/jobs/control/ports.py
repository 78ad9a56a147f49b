"""torchrun's store port on node 0, picked at planning."""

from __future__ import annotations

import random
import socket

from django.conf import settings

from ..models import Job, JobNode
from ..placement.candidates import Candidate, PlanError

J, N = Job.Status, JobNode.Status


LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}

# A job holds its master port from its dispatch until it has stopped.
HOLDS_PORT = [J.DISPATCHING, J.RUNNING, J.RECOVERING, J.STOPPING]


# --- planning -------------------------------------------------------------------------------------
def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def master_ports_taken(host: str) -> dict[int, int]:
    """The master ports live jobs hold on `host`: {port: job id}."""
    return dict(Job.objects.filter(status__in=HOLDS_PORT, master_addr=host).exclude(master_port=None)
                .values_list("master_port", "pk"))


def master_port_refusal(port: int, *, host: str | None = None, machine_name: str = "") -> str | None:
    """Why `port` cannot be a new job's master port on the machine at `host`, in words ("29501 is job
    7's master port on gpu-a"); None when it can: in the job-port range, held by no live job there,
    and bindable when that machine is this one (the rule pick_master_port picks by). Without a host,
    the range only."""
    low, high = settings.MASTER_PORT_RANGE
    if not low <= port <= high:
        return (f"{port} is outside the job-port range {low}-{high} (TORCHYARD_MASTER_PORT_MIN and "
                "TORCHYARD_MASTER_PORT_MAX)")
    if host is None:
        return None
    holder = master_ports_taken(host).get(port)
    if holder is not None:
        return f"{port} is job {holder}'s master port on {machine_name}"
    if host in LOCAL_HOSTS and not _port_is_free("127.0.0.1", port):
        return f"{port} is in use on {machine_name}"
    return None


def pick_master_port(machine: Candidate) -> int:
    """A port for torchrun's store on node 0: not used by another live job on that host, and
    actually bindable when that host is this one (embedded mode and tests)."""
    low, high = settings.MASTER_PORT_RANGE
    taken = master_ports_taken(machine.host)
    ports = [p for p in range(low, high + 1) if p not in taken]
    random.shuffle(ports)
    for port in ports[:200]:
        if machine.host not in LOCAL_HOSTS or _port_is_free("127.0.0.1", port):
            return port
    raise PlanError(f"no free master port in {low}-{high} on {machine.name}", kind="busy")

"""torchrun's store port on node 0, picked at planning."""

from __future__ import annotations

import random
import socket

from django.conf import settings

from ..models import Job, JobNode
from ..placement.candidates import Candidate, PlanError

J, N = Job.Status, JobNode.Status


LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


# --- planning -------------------------------------------------------------------------------------
def _port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_master_port(machine: Candidate) -> int:
    """A port for torchrun's store on node 0: not used by another live job on that host, and
    actually bindable when that host is this one (embedded mode and tests)."""
    low, high = settings.MASTER_PORT_RANGE
    taken = set(
        Job.objects.filter(status__in=[J.DISPATCHING, J.RUNNING, J.RECOVERING, J.STOPPING], master_addr=machine.host)
        .exclude(master_port=None)
        .values_list("master_port", flat=True)
    )
    ports = [p for p in range(low, high + 1) if p not in taken]
    random.shuffle(ports)
    for port in ports[:200]:
        if machine.host not in LOCAL_HOSTS or _port_is_free("127.0.0.1", port):
            return port
    raise PlanError(f"no free master port in {low}-{high} on {machine.name}", kind="busy")

"""The node's preflight, run by its supervisor before any rank starts (the protocol is preflight.py):
every node of a multi-node job reaches the master's address and port and agrees with it on Python,
torch, shared volumes and whether the job starts warm.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torchyard import protocol
from torchyard.protocol import NodeLaunch

from .argv import LAUNCHER_NONE
from .output_pump import OutputPump
from .preflight import MasterListener, PreflightError, Versions, reach_master, training_versions
from .volumes import remove_probes, write_probes


@dataclass(frozen=True)
class Agreement:
    """What the preflight settled: whether every node starts warm (a job's nodes start alike)."""

    all_warm: bool


def run_preflight(launch: NodeLaunch, pump: OutputPump, *, python: str, interface: str,
                  listener: MasterListener | None, warm: bool, tick: Callable[[str], None],
                  since: float, known: Versions | None = None) -> Agreement:
    """Raises PreflightError naming the cause (and publishes the failed preflight). A one-node job and
    launcher none (one plain process per node makes its own rendezvous, maybe with a quorum of the
    nodes: sdk.peers) have nothing to agree on. `known`: the training Python's versions when its warm
    pool has said them."""
    if launch.nnodes < 2 or launch.launcher == LAUNCHER_NONE:
        return Agreement(all_warm=warm)
    publisher = pump.publisher
    try:
        versions = known or training_versions(python)
        if listener is not None:
            peers = listener.serve(job_id=launch.job_id, attempt=launch.attempt, peers=set(range(1, launch.nnodes)),
                                   versions=versions, tick=tick, volumes=launch.volumes, warm=warm)
            all_warm = warm and all(hello.get("warm") is True for hello in peers.values())
            result: dict[str, Any] = {"role": "master", "peers": {
                str(rank): {k: hello.get(k) for k in ("hostname", "address", "interface")}
                for rank, hello in sorted(peers.items())}}
        else:
            hello = {"job": launch.job_id, "attempt": launch.attempt, "node_rank": launch.node_rank,
                     "hostname": socket.gethostname(), "interface": interface,
                     "python": versions.python, "torch": versions.torch, "warm": warm}
            # ReadWriteMany volumes: files the master must find in its own path of each (volumes.py).
            probes = write_probes(launch.volumes, job_id=launch.job_id, attempt=launch.attempt,
                                  node_rank=launch.node_rank)
            if probes:
                hello |= {"machine": launch.volumes[0].get("machine", ""), "volumes": [p.hello() for p in probes]}
            try:
                reached = reach_master(launch.master_addr, launch.master_port, hello, tick)
            finally:
                remove_probes(probes)
            result = {"role": "node", **reached.to_dict()}
            all_warm = warm and reached.warm
    except PreflightError as exc:
        publisher.emit(protocol.PREFLIGHT, ok=False, error=str(exc), interface=interface, hostname=socket.gethostname())
        raise PreflightError(f"preflight: {exc}") from exc
    seconds = time.monotonic() - since
    publisher.emit(protocol.PREFLIGHT, ok=True, interface=interface, hostname=socket.gethostname(),
                   python=versions.python, torch=versions.torch, seconds=round(seconds, 2), **result)
    where = f" through {interface}" if interface else ""
    pump.supervisor_line(
        f"preflight passed in {seconds:.2f} s: master {launch.master_addr}:{launch.master_port}{where}, "
        f"{versions.describe()} on every node"
        if result["role"] == "master" else
        f"preflight passed: reached the master {result['master']} from {result['local_address']}{where} "
        f"in {result['connect_ms']:.1f} ms, {versions.describe()} like the master")
    return Agreement(all_warm=all_warm)



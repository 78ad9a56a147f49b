"""The node's preflight, run by its supervisor before any rank starts (the protocol is preflight.py):
every node of a multi-node job reaches the master's address and port and agrees with it on Python,
torch, shared volumes and whether the job starts warm, and (on machines not measured yet) the links
between the nodes are measured and the network the job's traffic takes is chosen (links.py).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

from torchyard import protocol
from torchyard.node.network import local_addresses, network_stack
from torchyard.node.versions import training_versions
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import PreflightEvent, PreflightPeer

from . import links as link_probes
from .argv import LAUNCHER_NONE
from .output_pump import OutputPump
from .preflight import Hello, LinkProbe, MasterListener, PreflightError, Reached, Versions, reach_master
from .volumes import remove_probes, write_probes


@dataclass(frozen=True)
class Agreement:
    """What the preflight settled: whether every node starts warm (a job's nodes start alike), and the
    network the job's traffic is pinned to with the master's address on it ("": the routed default)."""

    all_warm: bool
    network: str = ""
    master_address: str = ""


def _probe(launch: NodeLaunch) -> tuple[LinkProbe | None, link_probes.ProbeServer | None]:
    """This node's probe port when the job's links are to be measured: not when the controller handed
    down a choice already made on these machines (launch.links)."""
    if launch.links.get("network"):
        return None, None
    server = link_probes.ProbeServer()
    addresses = [a.to_dict() for a in local_addresses()]
    return LinkProbe(port=server.port, addresses=addresses, seconds=link_probes.burst_seconds(launch.nnodes),
                     stack=network_stack()), server


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
    probe, server = _probe(launch)
    reached: Reached | None = None  # a node's; the master's has heard every node instead
    heard: dict[str, PreflightPeer] = {}
    try:
        versions = known or training_versions(python)
        if listener is not None:
            machines = {int(p.get("node_rank", 0)): str(p.get("machine") or p.get("host") or "") for p in launch.peers}
            peers = listener.serve(job_id=launch.job_id, attempt=launch.attempt, peers=set(range(1, launch.nnodes)),
                                   versions=versions, tick=tick, volumes=launch.volumes, warm=warm,
                                   links=probe, master_addr=launch.master_addr, machines=machines)
            all_warm = warm and all(hello.get("warm") is True for hello in peers.values())
            heard = {
                # No hello names its node's address: `address` has always been null here.
                str(rank): {"hostname": hello.get("hostname"), "address": None,
                            "interface": hello.get("interface")}
                for rank, hello in sorted(peers.items())}
        else:
            hello: Hello = {"job": launch.job_id, "attempt": launch.attempt, "node_rank": launch.node_rank,
                     "hostname": socket.gethostname(), "interface": interface,
                     "python": versions.python, "torch": versions.torch, "warm": warm}
            # ReadWriteMany volumes: files the master must find in its own path of each (volumes.py).
            probes = write_probes(launch.volumes, job_id=launch.job_id, attempt=launch.attempt,
                                  node_rank=launch.node_rank)
            if probes:
                hello |= {"machine": launch.volumes[0].get("machine", ""), "volumes": [p.hello() for p in probes]}
            try:
                reached = reach_master(launch.master_addr, launch.master_port, hello, tick, links=probe)
            finally:
                remove_probes(probes)
            all_warm = warm and reached.warm
    except PreflightError as exc:
        publisher.emit({"type": protocol.PREFLIGHT, "ok": False, "error": str(exc), "interface": interface,
                        "hostname": socket.gethostname()})
        raise PreflightError(f"preflight: {exc}") from exc
    finally:
        if server is not None:
            server.close()
    report = probe.report if probe is not None else None
    seconds = time.monotonic() - since
    passed: PreflightEvent = {"type": protocol.PREFLIGHT, "ok": True, "interface": interface,
                              "hostname": socket.gethostname(), "python": versions.python, "torch": versions.torch,
                              "seconds": round(seconds, 2)}
    if reached is None:
        passed["role"], passed["peers"] = "master", heard
        if report is not None:
            passed["links"] = report  # the job's link matrix: the controller keeps it on the job
    else:
        passed["role"], passed["master"], passed["local_address"] = "node", reached.master, reached.local_address
        passed["connect_ms"], passed["waited_s"], passed["warm"] = reached.connect_ms, reached.waited_s, reached.warm
    publisher.emit(passed)
    where = f" through {interface}" if interface else ""
    pump.supervisor_line(
        f"preflight passed in {seconds:.2f} s: master {launch.master_addr}:{launch.master_port}{where}, "
        f"{versions.describe()} on every node"
        if reached is None else
        f"preflight passed: reached the master {reached.master} from {reached.local_address}{where} "
        f"in {reached.connect_ms:.1f} ms, {versions.describe()} like the master")
    if probe is not None and probe.one_stack:
        pump.supervisor_line("links: every node of the job shares this machine's network stack, so its traffic "
                             "never leaves the machine: nothing measured, nothing pinned")
    if report is not None:
        pump.supervisor_line(f"links measured in {report.get('seconds', 0):g} s: {report.get('summary', '')}")
        return Agreement(all_warm=all_warm, network=str(report.get("chosen") or ""),
                         master_address=str(report.get("master_address") or ""))
    return Agreement(all_warm=all_warm, network=str(launch.links.get("network") or ""),
                     master_address=str(launch.links.get("master_address") or ""))



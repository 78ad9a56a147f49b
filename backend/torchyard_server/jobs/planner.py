"""Where every rank goes. Pure functions over snapshots of the machines, so the dry run
(`POST /api/jobs/plan`) and the real dispatch share one piece of logic and tests need no cluster."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torchyard.sdk.scaling import adjust_hyperparameters


class PlanError(Exception):
    """The spec cannot be placed now. `kind` says what would help:

    - "invalid": nothing would (the placement names unknown machines);
    - "capacity": more machines online (too few online machines could ever hold a node);
    - "busy": waiting (enough machines, but their GPUs are in use).
    Submission refuses "invalid" and "capacity" with a 400; a queued job waits on any of them.
    """

    def __init__(self, reason: str, *, kind: str):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind


@dataclass
class Candidate:
    """What the planner knows about one machine."""

    id: int
    name: str
    host: str
    status: str
    cpu_count: int = 0
    gpus: list[dict[str, Any]] = field(default_factory=list)
    busy_gpus: set[int] = field(default_factory=set)
    live_nodes: int = 0
    cpu_usage: float = 0.0

    @property
    def schedulable(self) -> bool:
        return self.status in ("online", "busy")

    def gpu_slots(self, min_memory_mb: int) -> int:
        """GPUs big enough for the job, busy or not: what the machine could ever offer."""
        return sum(1 for g in self.gpus if int(g.get("memory_mb") or 0) >= min_memory_mb)

    def free_gpus(self, min_memory_mb: int) -> list[int]:
        return [
            g["index"] for g in self.gpus
            if g["index"] not in self.busy_gpus and int(g.get("memory_mb") or 0) >= min_memory_mb
        ]


def _fits(machine: Candidate, gpus_per_node: int, min_gpu_memory: int) -> bool:
    return len(machine.free_gpus(min_gpu_memory)) >= gpus_per_node


def order_machines(machines: list[Candidate], policy: str) -> list[Candidate]:
    # pack: fill machines that already run work first; spread: the least loaded first.
    if policy == "pack":
        return sorted(machines, key=lambda m: (-m.live_nodes, m.name))
    return sorted(machines, key=lambda m: (m.live_nodes, m.cpu_usage, m.name))


def _shape(spec: dict[str, Any], fitting: int) -> tuple[int, int]:
    """(nodes, procs_per_node). DistroML's `workers` is a world size spread over what fits."""
    resources = spec["resources"]
    if "workers" not in resources:
        return resources["nodes"], resources["procs_per_node"]
    workers = resources["workers"]
    # torchrun's static ranks need the same process count on every node: use a divisor.
    for nodes in range(min(workers, max(fitting, 1)), 0, -1):
        if workers % nodes == 0:
            return nodes, workers // nodes
    return 1, workers


def plan_job(
    spec: dict[str, Any],
    machines: list[Candidate],
    *,
    pick_port: Callable[[Candidate], int],
) -> dict[str, Any]:
    """The execution plan for `spec` on `machines`, or PlanError saying what is missing."""
    resources, placement = spec["resources"], spec["placement"]
    gpus_per_node = resources.get("gpus_per_node", 0)
    min_gpu_memory = resources.get("min_gpu_memory", 0)

    if placement["machines"]:
        by_key = {m.name: m for m in machines} | {str(m.id): m for m in machines}
        missing = [key for key in placement["machines"] if key not in by_key]
        if missing:
            raise PlanError(f"unknown machines in placement: {', '.join(missing)}", kind="invalid")
        pool = [by_key[key] for key in placement["machines"]]
    else:
        pool = order_machines(machines, placement["policy"])

    online = [m for m in pool if m.schedulable]
    nodes, procs = _shape(spec, len(online))
    could_hold = [m for m in online if m.gpu_slots(min_gpu_memory) >= gpus_per_node]
    if len(could_hold) < nodes:
        need = f"{nodes} online machines" + (f" with {gpus_per_node} GPUs of >= {min_gpu_memory} MB" if gpus_per_node else "")
        offline = [m.name for m in pool if not m.schedulable]
        raise PlanError(
            f"needs {need}; {len(could_hold)} online machine(s) can hold a node"
            + (f" ({', '.join(offline)} not online)" if offline else ""),
            kind="capacity",
        )
    ready = [m for m in pool if m.schedulable and _fits(m, gpus_per_node, min_gpu_memory)]
    if len(ready) < nodes:
        raise PlanError(f"waiting for {nodes} machines with free GPUs: {len(ready)} free now", kind="busy")

    chosen = ready[:nodes]
    world_size = nodes * procs
    backend = spec["distributed"]["backend"]
    if backend == "auto":
        backend = "nccl" if gpus_per_node > 0 else "gloo"
    warnings = [
        f"{m.name} has {m.cpu_count} CPUs for {procs} processes"
        for m in chosen if m.cpu_count and procs > m.cpu_count and gpus_per_node == 0
    ]
    plan_nodes = []
    for node_rank, machine in enumerate(chosen):
        plan_nodes.append(
            {
                "node_rank": node_rank,
                "machine_id": machine.id,
                "machine_name": machine.name,
                "host": machine.host,
                "nproc": procs,
                "rank_start": node_rank * procs,
                "rank_end": node_rank * procs + procs - 1,
                "gpus": machine.free_gpus(min_gpu_memory)[:gpus_per_node],
            }
        )
    return {
        "world_size": world_size,
        "nnodes": nodes,
        "procs_per_node": procs,
        "master_addr": chosen[0].host,
        "master_port": pick_port(chosen[0]),
        "backend": backend,
        "nodes": plan_nodes,
        "hyperparameters": adjust_hyperparameters(spec["hyperparameters"], spec["scaling"], world_size),
        "warnings": warnings,
    }

"""The execution plan as a typed value (DESIGN.md section 7): where each node runs, the spares held
for the job, and the hyperparameters after the distributed adjustments, as planner.plan_job makes
it and Job.plan stores it. Plans stored before a key existed read with it absent (None)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .stored import StoredValue


@dataclass
class PlanVolume(StoredValue):
    name: str = ""
    path: str = ""  # on the node's machine
    mount_path: str = ""
    access_mode: str = "ReadWriteMany"


@dataclass
class PlanSpare(StoredValue):
    """A machine held for the job, warmed with its code; it takes a lost node's place as it is."""

    machine_id: int = 0
    machine_name: str = ""
    host: str = ""
    gpus: list[int] = field(default_factory=list)


@dataclass
class PlanNode(StoredValue):
    node_rank: int = 0
    machine_id: int = 0
    machine_name: str = ""
    host: str = ""
    nproc: int = 1
    rank_start: int = 0
    rank_end: int = 0
    gpus: list[int] = field(default_factory=list)
    volumes: list[PlanVolume] | None = None  # only for a job that asks for volumes
    OMIT_WHEN_NONE: ClassVar = frozenset({"volumes"})
    NESTED: ClassVar = {"volumes": [PlanVolume]}


@dataclass
class Plan(StoredValue):
    world_size: int = 0
    nnodes: int = 0
    procs_per_node: int = 1
    master_addr: str = ""
    master_port: int = 0
    backend: str = "gloo"
    launcher: str | None = None  # plans stored before launchers existed: torchrun
    nodes: list[PlanNode] = field(default_factory=list)
    spares: list[PlanSpare] | None = None
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    nodes_range: list[int] | None = None  # an elastic job's [MIN, MAX]
    warnings: list[str] = field(default_factory=list)
    preflight: dict[str, Any] | None = None  # {"master": "host:port", "versions": {machine: versions}}
    skipped: list[dict[str, Any]] | None = None  # every machine not chosen, with why
    # Set on the plan of an attempt that resumes after the job was preempted.
    after_preemption: bool | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"launcher", "spares", "nodes_range", "preflight", "skipped",
                                          "after_preemption"})
    INTERNAL: ClassVar = frozenset({"after_preemption"})
    NESTED: ClassVar = {"nodes": [PlanNode], "spares": [PlanSpare]}

    def node(self, node_rank: int) -> PlanNode | None:
        return next((n for n in self.nodes if n.node_rank == node_rank), None)

    @property
    def held_machine_ids(self) -> set[int]:
        """The machines of its nodes and its spares."""
        return {int(n.machine_id) for n in self.nodes} | {int(s.machine_id) for s in self.spares or []}

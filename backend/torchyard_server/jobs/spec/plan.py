"""The execution plan as a typed value (DESIGN.md section 7): where each node runs, the spares held
for the job, and the hyperparameters after the distributed adjustments, as planner.plan_job makes
it and Job.plan stores it. Plans stored before a key existed read with it absent (None)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from .stored import StoredValue, shown

ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")
BACKENDS = ("gloo", "nccl")
LAUNCHERS = ("torchrun", "none", "command", "ray", "accelerate")


@dataclass
class PlanVolume(StoredValue):
    name: str = ""
    path: str = shown("", help_text="on the node's machine")
    mount_path: str = ""
    access_mode: str = shown("ReadWriteMany", choices=list(ACCESS_MODES))


@dataclass
class PlanSpare(StoredValue):
    """A machine held for the job, warmed with its code; it takes a lost node's place as it is."""

    machine_id: int = 0
    machine_name: str = ""
    host: str = ""
    gpus: list[int] = shown(factory=list, help_text="the GPUs held on it for the job")


@dataclass
class PlanNode(StoredValue):
    node_rank: int = 0
    machine_id: int = 0
    machine_name: str = ""
    host: str = ""
    nproc: int = 1
    rank_start: int = 0
    rank_end: int = 0
    gpus: list[int] = shown(factory=list, help_text="GPU indexes on the machine")
    # Only in the plans of jobs that ask for volumes.
    volumes: list[PlanVolume] | None = shown(None, help_text="the job's volumes as this node's machine has them")
    OMIT_WHEN_NONE: ClassVar = frozenset({"volumes"})
    NESTED: ClassVar = {"volumes": [PlanVolume]}


@dataclass
class Plan(StoredValue):
    world_size: int = 0
    nnodes: int = 0
    procs_per_node: int = 1
    master_addr: str = ""
    master_port: int = 0
    backend: str = shown("gloo", choices=list(BACKENDS))
    # distributed.launcher (plans stored before launchers existed have none: torchrun).
    launcher: str | None = shown(None, choices=list(LAUNCHERS))
    nodes: list[PlanNode] = field(default_factory=list)
    # resources.spares: the machines held for the job (the job's plans without spares have none).
    spares: list[PlanSpare] | None = shown(
        None, help_text="hot spares held for the job, warmed with its code; one takes a lost machine's place")
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    # An elastic job's node range [MIN, MAX] (resources.nodes "MIN:MAX"); nnodes is what it starts with.
    nodes_range: list[int] | None = shown(None, item={"min_value": 1}, min_length=2, max_length=2)
    warnings: list[str] = field(default_factory=list)
    # {"master": "host:port", "versions": {machine: versions}} (plans stored before preflight have none).
    preflight: dict[str, Any] | None = None
    skipped: list[dict[str, Any]] | None = None  # every machine not chosen, with why (older plans: none)
    # Set on the plan of an attempt that resumes after the job was preempted.
    after_preemption: bool | None = None
    # The machines the next attempt leaves, and why ({machine id: "straggler ..."}): set when a
    # straggler is replaced (jobs/control/stragglers.py), read by the recovery's plan_in_place.
    leaving: dict[str, str] | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"launcher", "spares", "nodes_range", "preflight", "skipped",
                                          "after_preemption", "leaving"})
    INTERNAL: ClassVar = frozenset({"after_preemption", "leaving"})
    NESTED: ClassVar = {"nodes": [PlanNode], "spares": [PlanSpare]}

    def node(self, node_rank: int) -> PlanNode | None:
        return next((n for n in self.nodes if n.node_rank == node_rank), None)

    @property
    def held_machine_ids(self) -> set[int]:
        """The machines of its nodes and its spares."""
        return {int(n.machine_id) for n in self.nodes} | {int(s.machine_id) for s in self.spares or []}

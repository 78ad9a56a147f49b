"""The JobSpec as a typed value (DESIGN.md section 4): what JobSpecSerializer (spec.py) accepted,
every section filled with its defaults, and what Job.spec stores as JSON. Read once from the
stored JSON (JobSpec.from_json), written back with to_json; the serializer's defaults are repeated
here only so that a spec stored before a key existed reads as it would be submitted today."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..projects.models import DEFAULT_PROJECT
from .spec_secrets import public_spec
from .stored import StoredValue

DEFAULT_PREEMPTION_GRACE = 120.0
# elastic.min_interval's default: the fewest seconds between two resizes of an elastic job.
DEFAULT_RESIZE_INTERVAL = 300.0


@dataclass
class Code(StoredValue):
    bundle: str = ""
    size: int | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"size"})


@dataclass
class Runtime(StoredValue):
    pip: list[str] = field(default_factory=list)


@dataclass
class Resources(StoredValue):
    """Either nodes and procs_per_node (an elastic job: nodes is its MAX, min_nodes its MIN), or
    DistroML's workers (the world size, spread by the planner)."""

    nodes: int | None = None
    procs_per_node: int | None = None
    gpus_per_node: int = 0
    min_gpu_memory: int = 0
    min_nodes: int | None = None
    workers: int | None = None
    gpus_per_worker: int | None = None
    cpus_per_node: int | None = None
    memory_per_node: int | None = None
    spares: int | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"nodes", "procs_per_node", "min_nodes", "workers", "gpus_per_worker",
                                          "cpus_per_node", "memory_per_node", "spares"})

    @property
    def most_nodes(self) -> int:
        return int(self.nodes or 1)

    @property
    def fewest_nodes(self) -> int:
        """resources.min_nodes of an elastic job, else its node count."""
        return min(int(self.min_nodes or self.most_nodes), self.most_nodes)

    @property
    def elastic(self) -> bool:
        return self.workers is None and self.fewest_nodes < self.most_nodes

    @property
    def world_size(self) -> int:
        return self.workers or int(self.nodes or 1) * int(self.procs_per_node or 1)


@dataclass
class Placement(StoredValue):
    policy: str = "pack"
    machines: list[str] = field(default_factory=list)
    oversubscribe: bool = False
    labels: dict[str, str] | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"labels"})


@dataclass
class Distributed(StoredValue):
    backend: str = "auto"
    launcher: str = "torchrun"
    command: list[str] | None = None
    warm: bool | None = None  # absent from specs stored before warm pools: true
    strategy: str = "data_parallel"
    OMIT_WHEN_NONE: ClassVar = frozenset({"command", "warm"})


@dataclass
class Scaling(StoredValue):
    mode: str = "keep_global_batch"
    lr_rule: str = "linear"
    warmup_steps: int = 0


@dataclass
class Checkpointing(StoredValue):
    enabled: bool = True
    every_n_steps: int = 200
    store: str = "default"
    keep: int = 3


@dataclass
class FaultTolerance(StoredValue):
    max_restarts: int = 3
    heartbeat_timeout: float = 10.0
    stall_timeout: float | None = None  # null: 10x the job's median step time, at least 60 s
    on_stall: str = "report"
    ray_worker_loss: str | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"ray_worker_loss"})


@dataclass
class Compression(StoredValue):
    enabled: bool = False
    hook: str = "fp16"
    rank: int | None = None
    start_iter: int | None = None
    ratio: float | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"rank", "start_iter", "ratio"})


@dataclass
class Function(StoredValue):
    """A function job's pickled function and arguments: a bundle of its own (torchyard.fn)."""

    payload: str = ""
    name: str = ""
    python: str = ""
    size: int | None = None
    result_max_bytes: int | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"size", "result_max_bytes"})


@dataclass
class Volume(StoredValue):
    name: str = ""
    mount_path: str = ""
    access_mode: str = "ReadWriteMany"


@dataclass
class Elastic(StoredValue):
    min_interval: float = DEFAULT_RESIZE_INTERVAL


@dataclass
class Preemption(StoredValue):
    grace: float = DEFAULT_PREEMPTION_GRACE


@dataclass
class JobSpec(StoredValue):
    name: str = ""
    project: str = DEFAULT_PROJECT
    entrypoint: str | None = None
    module: str | None = None
    code: Code | None = None
    runtime: Runtime = field(default_factory=Runtime)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # Sealed values (secretbox): the validated spec never holds a secret in the clear.
    secret_env: dict[str, str] | None = None
    resources: Resources = field(default_factory=Resources)
    placement: Placement = field(default_factory=Placement)
    distributed: Distributed = field(default_factory=Distributed)
    hyperparameters: dict[str, Any] = field(default_factory=dict)  # the script's own, any JSON
    scaling: Scaling = field(default_factory=Scaling)
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    fault_tolerance: FaultTolerance = field(default_factory=FaultTolerance)
    compression: Compression = field(default_factory=Compression)
    elastic: Elastic | None = None
    function: Function | None = None
    volumes: list[Volume] | None = None
    framework: str = "pytorch"
    model: str | None = None
    dataset: str | None = None
    priority: int | None = None
    time_limit: int | None = None
    preemptible: bool | None = None
    preemption: Preemption | None = None

    OMIT_WHEN_NONE: ClassVar = frozenset({
        "entrypoint", "module", "code", "secret_env", "elastic", "function", "volumes", "model", "dataset",
        "priority", "time_limit", "preemptible", "preemption"})
    NESTED: ClassVar = {
        "code": Code, "runtime": Runtime, "resources": Resources, "placement": Placement,
        "distributed": Distributed, "scaling": Scaling, "checkpointing": Checkpointing,
        "fault_tolerance": FaultTolerance, "compression": Compression, "elastic": Elastic, "function": Function,
        "volumes": [Volume], "preemption": Preemption}

    @property
    def world_size(self) -> int:
        return self.resources.world_size

    @property
    def is_elastic(self) -> bool:
        return self.resources.elastic

    @property
    def may_be_preempted(self) -> bool:
        """preemptible (default true): false keeps a job from being preempted, and from borrowing."""
        return self.preemptible is not False

    @property
    def preemption_grace(self) -> float:
        return grace_of(self.preemption.to_json() if self.preemption is not None else None)

    @property
    def resize_interval(self) -> float:
        return float(self.elastic.min_interval) if self.elastic is not None else DEFAULT_RESIZE_INTERVAL

    @property
    def volume_names(self) -> tuple[str, ...]:
        return tuple(volume.name for volume in self.volumes or [])

    def public_json(self) -> dict[str, Any]:
        """The spec as the API shows it: secret_env's names, each value (sealed) as ***."""
        return public_spec(self.to_json())


def grace_of(preemption: dict[str, Any] | None) -> float:
    """preemption.grace as stored (the queue reads only that key of a running job's spec)."""
    grace = (preemption or {}).get("grace")
    return float(grace) if isinstance(grace, (int, float)) and not isinstance(grace, bool) else DEFAULT_PREEMPTION_GRACE

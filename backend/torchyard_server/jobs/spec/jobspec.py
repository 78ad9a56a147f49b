"""The JobSpec as a typed value (DESIGN.md section 4): what JobSpecSerializer (intake/serializer.py) accepted,
every section filled with its defaults, and what Job.spec stores as JSON. Read once from the
stored JSON (JobSpec.from_json), written back with to_json; the serializer's defaults are repeated
here only so that a spec stored before a key existed reads as it would be submitted today."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from torchyard.sdk.choices import HOOKS

from ...projects.models import DEFAULT_PROJECT
from .cadence import EveryNStepsField
from .plan import ACCESS_MODES, LAUNCHERS
from .secrets import public_spec
from .stall_timeout import STALL_AUTO, StallTimeoutField
from .stored import StoredValue, shown

# fault_tolerance.stragglers (jobs/control/stragglers.py).
STRAGGLER_POLICIES = ("report", "replace", "off")
# fault_tolerance.mode: restart stops every rank and relaunches the attempt from the last checkpoint;
# in_place replaces the dead rank alone while the others wait (torchft, workers/torchyard/warm/run.py).
RECOVERY_MODES = ("restart", "in_place")

DEFAULT_PREEMPTION_GRACE = 120.0
# elastic.min_interval's default: the fewest seconds between two resizes of an elastic job.
DEFAULT_RESIZE_INTERVAL = 300.0


@dataclass
class Code(StoredValue):
    bundle: str = shown("", help_text="sha256 of the job's code bundle")
    size: int | None = shown(None, help_text="the bundle's archive bytes")
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
    min_gpu_memory: int = shown(0, help_text="MB per GPU")
    min_nodes: int | None = shown(None, help_text="an elastic job's MIN (nodes is its MAX)")
    workers: int | None = shown(None, help_text="DistroML's form: the world size, spread by the planner")
    gpus_per_worker: int | None = None
    cpus_per_node: int | None = shown(None, help_text="CPU cores each node needs")
    memory_per_node: int | None = shown(None, help_text="bytes of free memory each node needs")
    spares: int | None = shown(None, help_text="hot spares: extra machines held for the job")
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
    policy: str = shown("pack", help_text="pack, spread, simple, balanced or an installed policy's name")
    machines: list[str] = shown(factory=list, help_text="manual placement, the master first")
    oversubscribe: bool = False
    labels: dict[str, str] | None = shown(None, help_text="machine labels every node's machine has")
    OMIT_WHEN_NONE: ClassVar = frozenset({"labels"})


@dataclass
class Distributed(StoredValue):
    backend: str = shown("auto", choices=["auto", "gloo", "nccl"])
    launcher: str = shown("torchrun", choices=list(LAUNCHERS))
    command: list[str] | None = shown(None, help_text="launcher command: the argv run once per node")
    # Specs stored before warm pools have no key: they read true, as a submission without it gets.
    warm: bool = shown(True, help_text="false: every rank starts cold, never from the warm pool")
    strategy: str = shown("data_parallel", choices=["data_parallel"])
    OMIT_WHEN_NONE: ClassVar = frozenset({"command"})


@dataclass
class Scaling(StoredValue):
    mode: str = shown("keep_global_batch", choices=["keep_global_batch", "scale_global_batch", "none"])
    lr_rule: str = shown("linear", choices=["linear", "sqrt"])
    warmup_steps: int = 0


# checkpointing.memory.budget's default: what a job may hold in each of its machines' memory.
DEFAULT_MEMORY_BUDGET = 4 << 30


@dataclass
class MemoryCheckpointing(StoredValue):
    """checkpointing.memory: checkpoints held in the agents' memory, each copied to other machines."""

    every_n_steps: int = shown(1, help_text="a memory checkpoint every N steps (sdk.checkpoint.memory_due)")
    replicas: int = shown(1, help_text="copies on other machines of the job (buddies), beside the saving machine's")
    budget: int = shown(DEFAULT_MEMORY_BUDGET, help_text="bytes the job may hold in each machine's memory: two saves")


@dataclass
class Checkpointing(StoredValue):
    enabled: bool = True
    every_n_steps: int | str = shown(200, field=EveryNStepsField)
    store: str = shown("default", choices=["default", "local", "s3"])
    keep: int = 3
    memory: MemoryCheckpointing | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"memory"})
    NESTED: ClassVar = {"memory": MemoryCheckpointing}


@dataclass
class FaultTolerance(StoredValue):
    mode: str = shown("restart", choices=list(RECOVERY_MODES))
    max_restarts: int = 3
    heartbeat_timeout: float = 10.0
    retry_same_error: int = shown(1, help_text=(
        "how many times a failure with the same Python exception (type, message, innermost frame of your "
        "code) at the same step is retried; lost machines, killed processes and hangs keep the whole "
        "max_restarts"))
    restart_delay: float = shown(0.0, help_text="seconds before the first restart, doubling for each next one (at "
                                                "most 60 s); 0: the first at once, then 2 s, 4 s, 8 s ...")
    stall_timeout: float | str | None = shown(STALL_AUTO, field=StallTimeoutField)
    on_stall: str = shown("report", choices=["report", "recover"])
    exit_grace: float = shown(30.0, help_text="seconds a rank may stay alive, idle, once its work is done, before it is ended")
    stragglers: str = shown("report", choices=list(STRAGGLER_POLICIES),
                            help_text="what a rank much slower than the others does: report, replace (onto a hot "
                                      "spare at the next committed checkpoint) or off")
    straggler_threshold: float = shown(0.3, help_text="how much slower than the median of the other ranks makes a straggler")
    straggler_window: float = shown(60.0, help_text="seconds a rank must stay that much slower to be named")
    ray_worker_loss: str | None = shown(None, choices=["recover", "tolerate"],
                                        help_text="framework ray: what a lost Ray worker node does")
    OMIT_WHEN_NONE: ClassVar = frozenset({"ray_worker_loss"})

    @property
    def pace_every(self) -> float:
        """Seconds between a node's `pace` events: a few per straggler window; 0 when off."""
        return 0.0 if self.stragglers == "off" else min(10.0, max(self.straggler_window / 3, 1.0))

    @property
    def stall_seconds(self) -> float | None:
        """The stall timeout the job set, in seconds; None for "auto" (or null, stored before "auto" was)."""
        return None if self.stall_timeout in (None, STALL_AUTO) else float(self.stall_timeout)


@dataclass
class Compression(StoredValue):
    enabled: bool = False
    hook: str = shown("fp16", choices=list(HOOKS))
    rank: int | None = shown(None, help_text="powersgd only")
    start_iter: int | None = shown(None, help_text="powersgd only")
    ratio: float | None = shown(None, help_text="topk only")
    OMIT_WHEN_NONE: ClassVar = frozenset({"rank", "start_iter", "ratio"})


@dataclass
class Function(StoredValue):
    """A function job's pickled function and arguments: a bundle of its own (torchyard.fn)."""

    payload: str = shown("", help_text="sha256 of the bundle holding the pickled function and arguments")
    name: str = shown("", help_text="the function's qualified name")
    python: str = shown("", help_text="the Python (major.minor) it was pickled on")
    size: int | None = shown(None, help_text="the payload bundle's archive bytes")
    result_max_bytes: int | None = None
    OMIT_WHEN_NONE: ClassVar = frozenset({"size", "result_max_bytes"})


@dataclass
class Volume(StoredValue):
    name: str = shown("", help_text="a volume machines declare (Machine.volumes)")
    mount_path: str = ""
    access_mode: str = shown("ReadWriteMany", choices=list(ACCESS_MODES))
    size: int | None = shown(None, help_text="bytes free the job needs on it: machines with less are skipped")
    storage_class: str | None = shown(None, help_text=(
        "the class the machine's agent declares the volume with (torchyard agent --volume NAME=PATH,class=CLASS): "
        "machines without it are skipped"))
    OMIT_WHEN_NONE: ClassVar = frozenset({"size", "storage_class"})


@dataclass
class Elastic(StoredValue):
    min_interval: float = shown(DEFAULT_RESIZE_INTERVAL, help_text="the fewest seconds between two resizes")


@dataclass
class Preemption(StoredValue):
    grace: float = shown(DEFAULT_PREEMPTION_GRACE, help_text="seconds to checkpoint and yield before the ranks are stopped")


@dataclass
class JobSpec(StoredValue):
    name: str = ""
    project: str = DEFAULT_PROJECT
    entrypoint: str | None = shown(None, help_text="a script in the job's code, or a built-in recipe")
    module: str | None = shown(None, help_text="run as `python -m MODULE` from the job's code instead of an entrypoint")
    code: Code | None = shown(None, help_text="absent for a built-in recipe")
    runtime: Runtime = field(default_factory=Runtime)
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    # Sealed values (secretbox): the validated spec never holds a secret in the clear.
    secret_env: dict[str, str] | None = shown(None, help_text="names only: every value is ***")
    resources: Resources = field(default_factory=Resources)
    placement: Placement = field(default_factory=Placement)
    distributed: Distributed = field(default_factory=Distributed)
    hyperparameters: dict[str, Any] = shown(factory=dict, help_text="as submitted: the script's own, any JSON")
    scaling: Scaling = field(default_factory=Scaling)
    checkpointing: Checkpointing = field(default_factory=Checkpointing)
    fault_tolerance: FaultTolerance = field(default_factory=FaultTolerance)
    compression: Compression = field(default_factory=Compression)
    elastic: Elastic | None = shown(None, help_text="an elastic job's (resources.nodes MIN:MAX) resize settings")
    function: Function | None = shown(None, help_text="a function job's function (torchyard.fn); absent for a script")
    volumes: list[Volume] | None = shown(None, help_text="shared directories the job mounts")
    framework: str = shown("pytorch", choices=["pytorch", "ray"])
    model: str | None = shown(None, help_text="DistroML's model name the entrypoint was chosen by")
    dataset: str | None = None
    priority: int | None = shown(None, help_text="as submitted (the job's current one is its `priority`)")
    time_limit: int | None = shown(None, help_text="seconds the job may run from its start")
    preemptible: bool | None = shown(None, help_text="false: never preempted (and never borrows); absent: true")
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

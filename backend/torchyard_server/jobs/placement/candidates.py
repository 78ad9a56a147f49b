"""What the planner knows of each machine (`Candidate`, read from the database by
`machine_candidates`), what one node of a job asks of one (`Need`), and why a job cannot be placed
(`PlanError`). The planner, the placement policies and the queue all take these."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone
from torchyard.protocol import GpuInfo

from ...machines.selectors import machine_list
from ...machines.volumes import MachineVolume, merged_volumes
from ..models import Job, JobNode
from ..spec.plan import Plan
from ..states import NODE_LIVE, SPARES_HELD


class PlanError(Exception):
    """The spec cannot be placed now. `kind` says what would help:

    - "invalid": nothing would (the placement names unknown machines);
    - "capacity": more machines online (too few online machines could ever hold a node);
    - "busy": waiting (enough machines, but their GPUs are in use).
    Submission refuses "invalid" and "capacity" with a 400; a queued job waits on any of them.
    `skipped` says, machine by machine, why none of them would do (see `plan_job`).
    """

    def __init__(self, reason: str, *, kind: str, skipped: list[dict[str, Any]] | None = None):
        super().__init__(reason)
        self.reason = reason
        self.kind = kind
        self.skipped = skipped or []


@dataclass
class Candidate:
    """What the planner knows about one machine."""

    id: int
    name: str
    host: str
    status: str
    cpu_count: int = 0
    gpus: list[GpuInfo] = field(default_factory=list)
    busy_gpus: set[int] = field(default_factory=set)
    live_nodes: int = 0
    busy_procs: int = 0  # processes of live nodes already placed here
    cpu_usage: float = 0.0
    # The training Python's versions as the agent reports them ("" from an agent too old to say).
    python_version: str = ""
    torch_version: str = ""
    # Offline because a node of a job was lost there, not because its agent went quiet: not planned
    # on until its agent heartbeats again (machines.services.machine_mark_suspect).
    suspect: bool = False
    # Why a hang's verdict quarantined it (Machine.quarantine_reason), while it is: its status is
    # then "quarantined", and nothing is planned on it.
    quarantine_reason: str = ""
    # Volumes by name, as this machine has them (machines/volumes.py merged_volumes).
    volumes: dict[str, MachineVolume] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    memory_total: int = 0  # bytes; 0: not reported
    memory_free: int = 0

    def lacks_volume(self, names: tuple[str, ...], sizes: tuple[tuple[str, int], ...] = (),
                     classes: tuple[tuple[str, str], ...] = ()) -> str | None:
        """Why the machine cannot give a node these volumes ("no volume shared-data"), or None.
        `classes`: the storage class the job asks of a volume, which its agent must declare;
        `sizes`: the bytes free it asks (a volume whose free space is unknown is given the benefit of the doubt)."""
        wanted_class, wanted_size = dict(classes), dict(sizes)
        for name in names:
            volume = self.volumes.get(name)
            if volume is None:
                return f"no volume {name}"
            if volume.get("exists") is False:
                return f"volume {name} missing on the machine ({volume.get('path')} does not exist)"
            asked, declared = wanted_class.get(name), volume.get("storage_class")
            if asked and declared != asked:
                return (f"volume {name} is of storage class {declared}, {asked} asked" if declared else
                        f"volume {name} has no storage class, {asked} asked (its agent declares one with "
                        f"--volume {name}=PATH,class={asked})")
            size, free = wanted_size.get(name), volume.get("free_bytes")
            if size and isinstance(free, int) and free < size:
                return f"volume {name} has {volume_size(free)} free, {volume_size(size)} asked"
        return None

    @property
    def versions(self) -> tuple[str, str]:
        """What nodes must share to train together: the torch release (any build of it), the Python minor
        version (as the nodes' preflight checks them, workers/torchyard/supervisor/preflight.py)."""
        return self.torch_version.split("+", 1)[0], ".".join(self.python_version.split(".")[:2])

    def describe_versions(self) -> str:
        return f"torch {self.torch_version or '?'} on Python {self.python_version or '?'}"

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


@dataclass(frozen=True)
class Need:
    """What one node of the job asks of its machine."""

    procs: int
    gpus: int = 0
    min_gpu_memory: int = 0
    oversubscribe: bool = False
    volumes: tuple[str, ...] = ()  # the names of the job's volumes: every node needs each one
    # What the job asks of a volume beyond its name (Volume.size, Volume.storage_class), by name.
    volume_sizes: tuple[tuple[str, int], ...] = ()
    volume_classes: tuple[tuple[str, str], ...] = ()
    # torchyard.Compute's asks (resources.cpus_per_node, memory_per_node, placement.labels) and a
    # function's Python (major.minor): it can only be unpickled by the same one.
    cpus: int = 0
    memory: int = 0
    memory_checkpoints: int = 0  # the part of `memory` that is checkpointing.memory.budget
    labels: tuple[tuple[str, str], ...] = ()
    python: str = ""


def bytes_text(size: int) -> str:
    return f"{size / 2**30:.1f} GiB"


def volume_size(size: int) -> str:
    """A volume's size in the largest binary unit it fills: "1.0 TiB", "40.0 GiB", "512 bytes"."""
    for power, unit in ((50, "PiB"), (40, "TiB"), (30, "GiB"), (20, "MiB"), (10, "KiB")):
        if size >= 2**power:
            return f"{size / 2**power:.1f} {unit}"
    return f"{size} bytes"


def held_spares(*, exclude_job: int | None = None) -> list[tuple[int, list[int], int]]:
    """(machine id, GPUs, processes) of every hot spare a live job holds (resources.spares; its plan
    names them): held as if a node of the job ran there, so no other job is planned onto them."""
    held = []
    for job_id, stored in Job.objects.filter(status__in=SPARES_HELD).values_list("pk", "plan"):
        if job_id != exclude_job:
            plan = Plan.from_json(stored)
            held += [(int(s.machine_id), list(s.gpus), int(plan.procs_per_node or 1)) for s in plan.spares or []]
    return held


def machine_candidates(*, exclude_job: int | None = None) -> list[Candidate]:
    """Snapshots for the planner: every machine with what live nodes already hold on it. Here and
    not in machines, which sits below jobs and knows nothing of nodes. `exclude_job`: as if that
    job's own nodes were gone (would the job fit larger once it stops?)."""
    live = JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False)
    if exclude_job is not None:
        live = live.exclude(job_id=exclude_job)
    live = live.values_list("machine_id", "gpus", "nproc")
    live_nodes: dict[int, int] = {}
    busy_procs: dict[int, int] = {}
    busy_gpus: dict[int, set[int]] = {}
    for machine_id, gpus, nproc in [*live, *held_spares(exclude_job=exclude_job)]:
        live_nodes[machine_id] = live_nodes.get(machine_id, 0) + 1
        busy_procs[machine_id] = busy_procs.get(machine_id, 0) + nproc
        busy_gpus.setdefault(machine_id, set()).update(gpus or [])
    # Offline with a heartbeat too recent for the offline sweep: a lost node made it suspect.
    now = timezone.now()
    quiet_since = now - timedelta(seconds=settings.MACHINE_OFFLINE_AFTER)
    return [
        Candidate(
            id=m.pk,
            name=m.name,
            host=m.host,
            status=m.status,
            cpu_count=int(m.capabilities.get("cpu_count") or 0),
            gpus=list(m.capabilities.get("gpus") or []),
            busy_gpus=busy_gpus.get(m.pk, set()),
            live_nodes=live_nodes.get(m.pk, 0),
            busy_procs=busy_procs.get(m.pk, 0),
            cpu_usage=float(m.current_load.get("cpu_usage") or 0.0),
            python_version=str(m.capabilities.get("python_version") or ""),
            torch_version=str(m.capabilities.get("torch_version") or ""),
            suspect=m.status == "offline" and m.last_heartbeat is not None and m.last_heartbeat > quiet_since,
            quarantine_reason=m.quarantine_reason if m.quarantined_at is not None else "",
            volumes={v["name"]: v for v in merged_volumes(m.volumes, m.capabilities)},
            labels=dict(m.labels or {}),
            memory_total=int(m.capabilities.get("memory") or 0),
            # The agent reports memory in use as a percentage of the total.
            memory_free=int(int(m.capabilities.get("memory") or 0)
                            * (1 - float(m.current_load.get("memory_usage") or 0.0) / 100)),
        )
        for m in machine_list()
    ]

"""The cluster as DistroML asks for it: its workers (our machines, each with its agent's health) and
what resources it has and holds (`GET /api/cluster/workers`, `/api/cluster/resources`).

Everyone signed in sees the cluster (projects.permissions: machines are readable by all), so what
live nodes take is shown as counts, never as jobs. Here and not in machines, which knows nothing of
nodes."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, TypedDict

from django.conf import settings
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ...jobs.models import JobNode
from ...jobs.states import NODE_LIVE
from ...machines.models import Machine
from ...machines.selectors import machine_list

M = Machine.Status
# Machines whose agents report: their resources count.
UP = (M.ONLINE, M.BUSY, M.DRAINING, M.QUARANTINED)


class WorkerGpu(TypedDict):
    index: int
    name: str
    memory_mb: int
    allocated: bool  # held by a live node
    usage_percent: float | None


class ClusterWorker(TypedDict):
    """A machine as DistroML's worker (WorkerOut)."""

    id: int
    name: str
    host: str
    status: str
    healthy: bool
    drained: bool
    last_heartbeat: dt.datetime | None
    heartbeat_age_seconds: float | None
    agent_version: str
    labels: dict[str, str]
    cpu_count: int
    memory_bytes: int
    cpu_usage_percent: float | None
    memory_usage_percent: float | None
    gpus: list[WorkerGpu]
    nodes_running: int
    processes_running: int


class CpuResources(TypedDict):
    cores: int
    processes_running: int
    usage_percent: float | None


class MemoryResources(TypedDict):
    total_bytes: int
    used_bytes: int


class GpuModelCount(TypedDict):
    name: str
    count: int


class GpuResources(TypedDict):
    total: int
    allocated: int
    free: int
    memory_mb: int
    usage_percent: float | None
    models: list[GpuModelCount]


class ClusterResources(TypedDict):
    """What the cluster has and holds (ResourcesOut)."""

    machines: dict[str, int]  # total, healthy, and how many are in each status
    cpu: CpuResources
    memory: MemoryResources
    gpus: GpuResources
    nodes_running: int


@dataclass
class Held:
    """What live nodes hold on one machine."""

    nodes: int = 0
    processes: int = 0
    gpus: set[int] = field(default_factory=set)


def held_by_machine() -> dict[int, Held]:
    held: dict[int, Held] = {}
    live = JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False).values_list("machine_id", "nproc", "gpus")
    for machine_id, nproc, gpus in live:
        entry = held.setdefault(machine_id, Held())
        entry.nodes += 1
        entry.processes += nproc
        entry.gpus.update(int(g) for g in gpus or [])
    return held


def _percent(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def worker(machine: Machine, held: Held, now: dt.datetime) -> ClusterWorker:
    caps, load = machine.capabilities or {}, machine.current_load or {}
    age = (now - machine.last_heartbeat).total_seconds() if machine.last_heartbeat else None
    usage = list(load.get("gpu_usage") or [])
    gpus: list[WorkerGpu] = []
    for position, gpu in enumerate(caps.get("gpus") or []):
        index = int(gpu.get("index", position))
        gpus.append({"index": index, "name": str(gpu.get("name") or ""), "memory_mb": int(gpu.get("memory_mb") or 0),
                     "allocated": index in held.gpus,
                     "usage_percent": _percent(usage[position]) if position < len(usage) else None})
    return {
        "id": machine.pk, "name": machine.name, "host": machine.host, "status": machine.status,
        "healthy": machine.status in UP and age is not None and age <= settings.MACHINE_OFFLINE_AFTER,
        "drained": machine.drained, "last_heartbeat": machine.last_heartbeat, "heartbeat_age_seconds": age,
        "agent_version": machine.agent_version, "labels": machine.labels or {},
        "cpu_count": int(caps.get("cpu_count") or 0), "memory_bytes": int(caps.get("memory") or 0),
        "cpu_usage_percent": _percent(load.get("cpu_usage")), "memory_usage_percent": _percent(load.get("memory_usage")),
        "gpus": gpus, "nodes_running": held.nodes, "processes_running": held.processes,
    }


def cluster_workers() -> list[ClusterWorker]:
    held, now = held_by_machine(), timezone.now()
    return [worker(m, held.get(m.pk, Held()), now) for m in machine_list()]


def cluster_resources() -> ClusterResources:
    workers = cluster_workers()
    up = [w for w in workers if w["status"] in UP]
    # New nodes go to online and busy machines only: a draining or quarantined machine's idle GPUs are not free.
    placeable = [w for w in up if w["status"] not in (M.DRAINING, M.QUARANTINED)]
    cores = sum(w["cpu_count"] for w in up)
    memory = sum(w["memory_bytes"] for w in up)
    gpus = [g for w in up for g in w["gpus"]]
    gpu_usage = [g["usage_percent"] for g in gpus if g["usage_percent"] is not None]
    return {
        "machines": {"total": len(workers), "healthy": sum(w["healthy"] for w in workers),
                     **{status: sum(w["status"] == status for w in workers) for status in M.values}},
        "cpu": {
            "cores": cores,
            "processes_running": sum(w["processes_running"] for w in up),
            # Weighted by cores: a busy 64-core machine weighs more than an idle laptop.
            "usage_percent": (sum((w["cpu_usage_percent"] or 0.0) * w["cpu_count"] for w in up) / cores) if cores else None,
        },
        "memory": {
            "total_bytes": memory,
            "used_bytes": int(sum((w["memory_usage_percent"] or 0.0) / 100 * w["memory_bytes"] for w in up)),
        },
        "gpus": {
            "total": len(gpus),
            "allocated": sum(g["allocated"] for g in gpus),
            "free": sum(not g["allocated"] for w in placeable for g in w["gpus"]),
            "memory_mb": sum(g["memory_mb"] for g in gpus),
            "usage_percent": sum(gpu_usage) / len(gpu_usage) if gpu_usage else None,
            "models": [{"name": name, "count": n} for name, n in sorted(Counter(g["name"] for g in gpus).items())],
        },
        "nodes_running": sum(w["nodes_running"] for w in up),
    }


class WorkerGpuOut(serializers.Serializer):
    index = serializers.IntegerField()
    name = serializers.CharField(allow_blank=True)
    memory_mb = serializers.IntegerField()
    allocated = serializers.BooleanField(help_text="Held by a live node.")
    usage_percent = serializers.FloatField(allow_null=True)


class WorkerOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    host = serializers.CharField()
    status = serializers.ChoiceField(choices=M.choices)
    healthy = serializers.BooleanField(help_text=(
        "Its agent reports (online, busy or draining) and its last heartbeat is within TORCHYARD_MACHINE_OFFLINE_AFTER."))
    drained = serializers.BooleanField()
    last_heartbeat = serializers.DateTimeField(allow_null=True)
    heartbeat_age_seconds = serializers.FloatField(allow_null=True)
    agent_version = serializers.CharField(allow_blank=True)
    labels = serializers.DictField(child=serializers.CharField())
    cpu_count = serializers.IntegerField()
    memory_bytes = serializers.IntegerField()
    cpu_usage_percent = serializers.FloatField(allow_null=True)
    memory_usage_percent = serializers.FloatField(allow_null=True)
    gpus = WorkerGpuOut(many=True)
    nodes_running = serializers.IntegerField(help_text="Live nodes of any job here.")
    processes_running = serializers.IntegerField()


class MachineCountsOut(serializers.Serializer):
    total = serializers.IntegerField()
    healthy = serializers.IntegerField()
    pending = serializers.IntegerField()
    online = serializers.IntegerField()
    busy = serializers.IntegerField()
    draining = serializers.IntegerField()
    quarantined = serializers.IntegerField(help_text="a hang's verdict named a rank there: nothing is placed there")
    offline = serializers.IntegerField()


class CpuOut(serializers.Serializer):
    cores = serializers.IntegerField(help_text="Of the machines whose agents report.")
    processes_running = serializers.IntegerField()
    usage_percent = serializers.FloatField(allow_null=True)


class MemoryOut(serializers.Serializer):
    total_bytes = serializers.IntegerField()
    used_bytes = serializers.IntegerField()


class GpuModelOut(serializers.Serializer):
    name = serializers.CharField(allow_blank=True)
    count = serializers.IntegerField()


class GpusOut(serializers.Serializer):
    total = serializers.IntegerField()
    allocated = serializers.IntegerField()
    free = serializers.IntegerField(help_text="Not held, on machines new nodes may go to (not draining).")
    memory_mb = serializers.IntegerField()
    usage_percent = serializers.FloatField(allow_null=True)
    models = GpuModelOut(many=True)


class ResourcesOut(serializers.Serializer):
    machines = MachineCountsOut()
    cpu = CpuOut()
    memory = MemoryOut()
    gpus = GpusOut()
    nodes_running = serializers.IntegerField()


class ClusterWorkersView(APIView):
    """Every machine (DistroML's workers) with its agent's health, what it has and what live nodes
    hold there."""

    @extend_schema(responses=WorkerOut(many=True))
    def get(self, request):
        return Response(WorkerOut(cluster_workers(), many=True).data)


class ClusterResourcesView(APIView):
    """CPU, memory and GPUs of the machines whose agents report, and what live nodes hold."""

    @extend_schema(responses=ResourcesOut)
    def get(self, request):
        return Response(ResourcesOut(cluster_resources()).data)

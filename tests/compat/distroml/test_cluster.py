"""DistroML's cluster routes: `GET /api/cluster/workers` (every machine with its agent's health and
what live nodes hold there, as counts) and `/api/cluster/resources` (the totals)."""

from __future__ import annotations

import datetime as dt

import pytest
from clients import signed_in
from django.utils import timezone
from factories import bring_online, make_job
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_create

pytestmark = pytest.mark.django_db
WORKER_FIELDS = {"id", "name", "host", "status", "healthy", "drained", "last_heartbeat", "heartbeat_age_seconds",
                 "agent_version", "labels", "cpu_count", "memory_bytes", "cpu_usage_percent", "memory_usage_percent",
                 "gpus", "nodes_running", "processes_running"}
A100 = {"name": "A100", "memory_mb": 40_000}


@pytest.fixture
def cluster(owner):
    gpu_a, _ = bring_online("gpu-a", gpus=[{"index": i, **A100} for i in range(4)], cpu_count=32)
    gpu_b, _ = bring_online("gpu-b", gpus=[{"index": 0, "name": "L4", "memory_mb": 24_000}], cpu_count=8)
    drained, _ = bring_online("cpu-c", cpu_count=16)
    Machine.objects.filter(pk=drained.pk).update(status=Machine.Status.DRAINING, drained=True)
    stale, _ = bring_online("gone-d", gpus=[{"index": 0, **A100}])
    Machine.objects.filter(pk=stale.pk).update(status=Machine.Status.OFFLINE,
                                               last_heartbeat=timezone.now() - dt.timedelta(minutes=5))
    machine_create(name="new-e", host="10.0.0.5")  # pending: its agent never reported
    job = make_job(name="big", owner=owner, status=Job.Status.RUNNING)
    JobNode.objects.create(job=job, attempt=0, machine=gpu_a, machine_name="gpu-a", host="h", node_rank=0, nproc=2,
                           rank_start=0, rank_end=1, gpus=[1, 3], status=JobNode.Status.RUNNING)
    JobNode.objects.create(job=job, attempt=0, machine=gpu_b, machine_name="gpu-b", host="h", node_rank=1, nproc=1,
                           rank_start=2, rank_end=2, gpus=[0], status=JobNode.Status.COMPLETED)  # not live
    return gpu_a


def test_workers_show_each_machines_health_and_what_is_held_there(api, cluster):
    workers = {w["name"]: w for w in api.get("/api/cluster/workers").json()}
    assert list(workers) == ["cpu-c", "gone-d", "gpu-a", "gpu-b", "new-e"]
    a = workers["gpu-a"]
    assert set(a) == WORKER_FIELDS
    assert (a["id"], a["status"], a["healthy"], a["drained"], a["agent_version"]) == (cluster.pk, "online", True, False, "test")
    assert 0 <= a["heartbeat_age_seconds"] < 60 and a["last_heartbeat"]
    assert (a["cpu_count"], a["memory_bytes"], a["cpu_usage_percent"], a["memory_usage_percent"]) == (32, 8 << 30, 1.0, 10.0)
    assert a["gpus"] == [{"index": i, "name": "A100", "memory_mb": 40_000, "allocated": i in (1, 3), "usage_percent": None}
                         for i in range(4)]
    assert (a["nodes_running"], a["processes_running"]) == (1, 2)
    assert workers["gpu-b"]["nodes_running"] == 0 and not workers["gpu-b"]["gpus"][0]["allocated"]
    assert workers["cpu-c"]["healthy"] and workers["cpu-c"]["drained"]
    assert not workers["gone-d"]["healthy"] and workers["gone-d"]["heartbeat_age_seconds"] > 60
    assert (workers["new-e"]["status"], workers["new-e"]["healthy"], workers["new-e"]["last_heartbeat"]) == ("pending", False, None)


def test_resources_add_up_what_reporting_machines_have_and_hold(api, cluster, teammate):
    body = api.get("/api/cluster/resources").json()
    assert body == {
        "machines": {"total": 5, "healthy": 3, "pending": 1, "online": 2, "busy": 0, "draining": 1, "quarantined": 0,
                     "offline": 1},
        # The offline and pending machines count for nothing.
        "cpu": {"cores": 32 + 8 + 16, "processes_running": 2, "usage_percent": pytest.approx(1.0)},
        "memory": {"total_bytes": 3 * (8 << 30), "used_bytes": int(3 * 0.1 * (8 << 30))},
        "gpus": {"total": 5, "allocated": 2, "free": 3, "memory_mb": 4 * 40_000 + 24_000, "usage_percent": None,
                 "models": [{"name": "A100", "count": 4}, {"name": "L4", "count": 1}]},
        "nodes_running": 1,
    }
    # Everyone signed in sees the cluster, whose jobs are not named there.
    assert signed_in(teammate).get("/api/cluster/resources").json() == body

"""The machine list is written by FlatListSerializer (listing.py), which skips DRF's per-field
machinery, and GET /api/machines by PostgreSQL itself (machines/selectors.machine_list_json): their
output must be, field for field, what MachineOut writes for each machine alone."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from factories import bring_online, make_job
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.models import Machine
from torchyard_server.machines.selectors import machine_list, machine_list_json
from torchyard_server.machines.serializers import MachineOut

pytestmark = pytest.mark.django_db


def test_the_list_is_each_machines_own_representation(staff_api, owner):
    gpu_box, _ = bring_online("gpu-box", gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}])
    bring_online("cpu-box")
    staff_api.post("/api/machines", {"name": "never-seen", "host": "10.1.1.1", "labels": {"rack": "b2"}}, format="json")
    job = make_job(name="j", owner=owner, status=Job.Status.RUNNING)
    JobNode.objects.create(job=job, attempt=0, machine=gpu_box, machine_name=gpu_box.name, host="h", node_rank=0,
                           nproc=2, rank_start=0, rank_end=1, gpus=[0], status=JobNode.Status.RUNNING)

    listed = MachineOut(machine_list(), many=True).data
    one_by_one = [MachineOut(machine).data for machine in machine_list()]
    assert listed == one_by_one
    assert [m["name"] for m in listed] == ["cpu-box", "gpu-box", "never-seen"]
    by_name = {m["name"]: m for m in listed}
    assert by_name["never-seen"]["last_heartbeat"] is None and by_name["never-seen"]["labels"] == {"rack": "b2"}
    assert by_name["gpu-box"]["usage"] == [{"project": "default", "gpus": 1, "processes": 2}]
    assert by_name["gpu-box"]["last_heartbeat"].endswith("Z")
    assert staff_api.get("/api/machines").json() == [dict(m) for m in listed]
    assert Machine.objects.count() == 3


def test_the_list_postgresql_writes_is_the_serializers_on_awkward_values(api, owner):
    """GET /api/machines is written by PostgreSQL (selectors.machine_list_json): awkward values come
    out as MachineOut writes them, timestamps with and without microseconds included."""
    whole_second = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    box, _ = bring_online("zeta-box", gpus=[{"index": 0, "name": "A100 \"80GB\"", "memory_mb": 81920}])
    Machine.objects.filter(pk=box.pk).update(
        labels={"note": "tab\there, quote \" backslash \\ newline\n", "ünï": "cödé ✓ 🚀"},
        current_load={"cpu_usage": 12.345, "memory_usage": 0.1, "gpu_usage": [99.5]},
        last_heartbeat=whole_second, created_at=whole_second.replace(microsecond=7))
    bring_online("alpha-box")
    job = make_job(name="j", owner=owner, status=Job.Status.RUNNING)
    for rank, gpus in enumerate(([0], [])):
        JobNode.objects.create(job=job, attempt=0, machine=box, machine_name=box.name, host="h", node_rank=rank,
                               nproc=1, rank_start=rank, rank_end=rank, gpus=gpus, status=JobNode.Status.RUNNING)

    assert machine_list_json() is not None  # the tests run on PostgreSQL
    response = api.get("/api/machines")
    assert response.status_code == 200 and response["Content-Type"] == "application/json"
    served = response.json()
    assert served == [dict(MachineOut(machine).data) for machine in machine_list()]
    assert [list(m) for m in served] == [list(MachineOut.Meta.fields)] * 2  # the fields in MachineOut's order
    zeta = served[1]
    assert (zeta["last_heartbeat"], zeta["created_at"]) == ("2026-01-02T03:04:05Z", "2026-01-02T03:04:05.000007Z")
    assert zeta["usage"] == [{"project": "default", "gpus": 1, "processes": 2}]
    assert list(zeta["usage"][0]) == ["project", "gpus", "processes"]


def test_an_empty_list(api):
    assert api.get("/api/machines").json() == []


def test_where_timestamps_are_not_written_in_utc_the_serializer_writes_the_list(api, settings):
    bring_online("m1")
    settings.TIME_ZONE = "Europe/Paris"
    served = api.get("/api/machines").json()
    assert served == [dict(MachineOut(machine).data) for machine in machine_list()]
    assert served[0]["created_at"].endswith(("+01:00", "+02:00"))

"""The machine list is written by FlatListSerializer (listing.py), which skips DRF's per-field
machinery: its output must be, field for field, what MachineOut writes for each machine alone."""

from __future__ import annotations

import pytest
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.models import Machine
from torchyard_server.machines.selectors import machine_list
from torchyard_server.machines.serializers import MachineOut

from .conftest import bring_online

pytestmark = pytest.mark.django_db


def test_the_list_is_each_machines_own_representation(api, owner):
    gpu_box, _ = bring_online("gpu-box", gpus=[{"index": 0, "name": "H100", "memory_mb": 81559}])
    bring_online("cpu-box")
    api.post("/api/machines", {"name": "never-seen", "host": "10.1.1.1", "labels": {"rack": "b2"}}, format="json")
    job = Job.objects.create(name="j", spec={}, owner=owner, status=Job.Status.RUNNING)
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
    assert api.get("/api/machines").json() == [dict(m) for m in listed]
    assert Machine.objects.count() == 3

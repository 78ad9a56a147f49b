"""Machines' volumes (declared by the agent or on the server) and the planner: a job goes only to
machines with every volume it asks for, says per machine why not, and is refused when no machine
has one; the plan's nodes carry each machine's path, and the launch each node's own."""

from __future__ import annotations

import json

import pytest
from clients import signed_in
from factories import bring_online
from torchyard_server.jobs.control.launch import launch_payload as _launch_payload
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.placement.candidates import Candidate, PlanError
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan, PlanVolume
from torchyard_server.machines.models import Machine
from torchyard_server.machines.selectors import machine_list, machine_list_json
from torchyard_server.machines.serializers import MachineOut
from torchyard_server.machines.services import machine_record_heartbeat

pytestmark = pytest.mark.django_db

JOB = {"name": "v", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": 2, "procs_per_node": 1},
       "volumes": [{"name": "shared-data", "mount_path": "data"}]}


def report_volumes(machine: Machine, token: str, volumes: list[dict]) -> None:
    """One heartbeat of the machine's agent with its --volume declarations."""
    machine_record_heartbeat(event={"machine": machine.pk, "token": token, "agent_version": "test",
                                    "capabilities": {**machine.capabilities, "volumes": volumes}, "load": {}})


def agent_volume(name: str, path: str, exists: bool = True) -> dict:
    return {"name": name, "path": path, "exists": exists, "total_bytes": 100 if exists else None,
            "free_bytes": 40 if exists else None}


def reasons(skipped: list[dict]) -> dict[str, str]:
    return {entry["machine_name"]: entry["reason"] for entry in skipped}


# --- machines -------------------------------------------------------------------------------------
def test_staff_declare_volumes_on_the_server_and_members_may_not(staff_api, teammate):
    machine, _ = bring_online("box")
    response = staff_api.patch(f"/api/machines/{machine.pk}", {"volumes": {"shared-data": "/mnt/nfs/shared/"}},
                         format="json")
    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["declared_volumes"] == {"shared-data": "/mnt/nfs/shared"}
    assert body["volumes"] == [{"name": "shared-data", "path": "/mnt/nfs/shared", "source": "server",
                                "exists": None, "total_bytes": None, "free_bytes": None, "storage_class": None}]
    assert signed_in(teammate).patch(f"/api/machines/{machine.pk}", {"volumes": {}}, format="json").status_code == 403
    assert Machine.objects.get(pk=machine.pk).volumes == {"shared-data": "/mnt/nfs/shared"}


@pytest.mark.parametrize("volumes", [{"Bad": "/x"}, {"ok": "relative/path"}, {"ok": ""}])
def test_a_bad_volume_declaration_is_a_400(staff_api, volumes):
    machine, _ = bring_online("box")
    response = staff_api.patch(f"/api/machines/{machine.pk}", {"volumes": volumes}, format="json")
    assert response.status_code == 400
    assert "volumes" in response.json()


def test_the_agents_path_wins_and_the_list_postgresql_writes_agrees(staff_api):
    machine, token = bring_online("box")
    bring_online("other")
    staff_api.patch(f"/api/machines/{machine.pk}", {"volumes": {"shared-data": "/server/says", "only-server": "/srv"}},
              format="json")
    report_volumes(machine, token, [agent_volume("shared-data", "/agent/says") | {"storage_class": "juicefs-sc"},
                                    agent_volume("gone", "/x", False)])
    detail = staff_api.get(f"/api/machines/{machine.pk}").json()
    assert detail["volumes"] == [
        {"name": "gone", "path": "/x", "source": "agent", "exists": False, "total_bytes": None, "free_bytes": None,
         "storage_class": None},
        {"name": "only-server", "path": "/srv", "source": "server", "exists": None, "total_bytes": None,
         "free_bytes": None, "storage_class": None},
        {"name": "shared-data", "path": "/agent/says", "source": "agent", "exists": True, "total_bytes": 100,
         "free_bytes": 40, "storage_class": "juicefs-sc"},
    ]
    assert detail["capabilities"]["volumes"][0]["name"] == "shared-data"
    listed = json.loads(machine_list_json())
    assert listed == [dict(MachineOut(m).data) for m in machine_list()]
    assert listed == [dict(m) for m in MachineOut(machine_list(), many=True).data]
    assert listed[1]["volumes"] == [] and listed[1]["declared_volumes"] == {}


# --- the planner ----------------------------------------------------------------------------------
def candidate(id_: int, name: str, **volumes: dict) -> Candidate:
    return Candidate(id_, name, f"h{id_}", "online", cpu_count=4, volumes=volumes)


def spec(volumes: list[dict], nodes: int = 2) -> JobSpec:
    return JobSpec.from_json({"resources": {"nodes": nodes, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0},
            "placement": {"policy": "pack", "machines": [], "oversubscribe": False},
            "distributed": {"backend": "auto"}, "hyperparameters": {}, "scaling": {"mode": "none"},
            "volumes": volumes})


def test_the_planner_places_only_where_every_volume_is_and_says_why_not():
    machines = [
        candidate(1, "a", **{"shared-data": {"path": "/mnt/a", "exists": True}}),
        candidate(2, "b", **{"shared-data": {"path": "/mnt/b", "exists": None}}),
        candidate(3, "c"),
        candidate(4, "d", **{"shared-data": {"path": "/mnt/d", "exists": False}}),
    ]
    plan = plan_job(spec([{"name": "shared-data", "mount_path": "data", "access_mode": "ReadWriteMany"}]),
                    machines, pick_port=lambda m: 29500)
    assert {n.machine_name for n in plan.nodes} == {"a", "b"}
    by_machine = {n.machine_name: n.volumes for n in plan.nodes}
    assert by_machine["a"] == [PlanVolume(name="shared-data", path="/mnt/a", mount_path="data",
                                          access_mode="ReadWriteMany")]
    assert by_machine["b"][0].path == "/mnt/b"
    assert reasons(plan.skipped) == {
        "c": "no volume shared-data",
        "d": "volume shared-data missing on the machine (/mnt/d does not exist)",
    }


def test_a_job_no_machine_can_give_its_volume_is_refused_as_capacity():
    machines = [candidate(1, "a", scratch={"path": "/s", "exists": True}), candidate(2, "b")]
    with pytest.raises(PlanError) as refused:
        plan_job(spec([{"name": "shared-data"}], nodes=1), machines, pick_port=lambda m: 29500)
    assert refused.value.kind == "capacity"
    assert "with volume shared-data" in refused.value.reason
    assert reasons(refused.value.skipped) == {"a": "no volume shared-data", "b": "no volume shared-data"}


def test_plans_without_volumes_are_unchanged():
    plan = plan_job(spec([], nodes=1), [candidate(1, "a")], pick_port=lambda m: 29500)
    assert plan.nodes[0].volumes is None and "volumes" not in plan.to_json()["nodes"][0]


def test_a_volume_with_less_free_space_than_the_job_asks_is_skipped_saying_how_much():
    machines = [
        candidate(1, "roomy", **{"shared-data": {"path": "/mnt/a", "exists": True, "free_bytes": 2 << 40}}),
        candidate(2, "full", **{"shared-data": {"path": "/mnt/b", "exists": True, "free_bytes": 40 << 30}}),
        # Declared only on the server: how full it is is unknown, and the node checks it exists.
        candidate(3, "unknown", **{"shared-data": {"path": "/mnt/c", "exists": None, "free_bytes": None}}),
    ]
    plan = plan_job(spec([{"name": "shared-data", "size": 1 << 40}]), machines, pick_port=lambda m: 29500)
    assert {n.machine_name for n in plan.nodes} == {"roomy", "unknown"}
    assert reasons(plan.skipped) == {"full": "volume shared-data has 40.0 GiB free, 1.0 TiB asked"}
    assert plan_job(spec([{"name": "shared-data"}], nodes=3), machines, pick_port=lambda m: 29500).nnodes == 3


def test_a_storage_class_places_only_where_the_agent_declares_it_and_says_how_to_declare_it():
    machines = [
        candidate(1, "jfs", **{"shared-data": {"path": "/mnt/a", "exists": True, "storage_class": "juicefs-sc"}}),
        candidate(2, "nfs", **{"shared-data": {"path": "/mnt/b", "exists": True, "storage_class": "nfs-sc"}}),
        candidate(3, "plain", **{"shared-data": {"path": "/mnt/c", "exists": True}}),
    ]
    plan = plan_job(spec([{"name": "shared-data", "storage_class": "juicefs-sc"}], nodes=1), machines,
                    pick_port=lambda m: 29500)
    assert [n.machine_name for n in plan.nodes] == ["jfs"]
    assert reasons(plan.skipped) == {
        "nfs": "volume shared-data is of storage class nfs-sc, juicefs-sc asked",
        "plain": "volume shared-data has no storage class, juicefs-sc asked (its agent declares one with "
                 "--volume shared-data=PATH,class=juicefs-sc)",
    }


def test_a_job_no_machine_can_give_its_size_or_class_is_refused_naming_them():
    machines = [candidate(1, "a", **{"shared-data": {"path": "/s", "exists": True, "free_bytes": 10}})]
    with pytest.raises(PlanError) as refused:
        plan_job(spec([{"name": "shared-data", "size": 1 << 40, "storage_class": "juicefs-sc"}], nodes=1), machines,
                 pick_port=lambda m: 29500)
    assert refused.value.kind == "capacity"
    assert "with volume shared-data (1.0 TiB free, storage class juicefs-sc)" in refused.value.reason
    assert reasons(refused.value.skipped) == {"a": "volume shared-data has no storage class, juicefs-sc asked (its "
                                                   "agent declares one with --volume shared-data=PATH,class=juicefs-sc)"}


def test_a_volumes_size_and_class_are_stored_with_the_spec_and_left_out_when_not_asked():
    volumes = [{"name": "shared-data", "mount_path": "data", "access_mode": "ReadWriteMany", "size": 1 << 40,
                "storage_class": "juicefs-sc"}, {"name": "scratch", "mount_path": "s", "access_mode": "ReadWriteOnce"}]
    stored = spec(volumes).to_json()["volumes"]
    assert stored == volumes
    assert (spec(volumes).volumes[0].size, spec(volumes).volumes[1].storage_class) == (1 << 40, None)


def test_the_api_refuses_at_plan_and_submit_time_naming_each_machine(api):
    bring_online("a")
    bring_online("b")
    response = api.post("/api/jobs/plan", JOB, format="json")
    assert response.status_code == 400
    assert reasons(response.json()["skipped"]) == {"a": "no volume shared-data", "b": "no volume shared-data"}
    response = api.post("/api/jobs", JOB, format="json")
    assert response.status_code == 400
    assert "volume shared-data" in str(response.json())
    assert not Job.objects.exists()


def test_each_nodes_launch_carries_its_machines_path_and_a_volume_checkpoint_store(api, owner):
    machines = {}
    for name in ("a", "b"):
        machine, token = bring_online(name)
        report_volumes(machine, token, [agent_volume("shared-data", f"/mnt/{name}")])
        machines[name] = machine
    body = api.post("/api/jobs/plan", {**JOB, "checkpointing": {"store": "volume:shared-data"}}, format="json").json()
    assert {n["machine_name"]: n["volumes"][0]["path"] for n in body["nodes"]} == {"a": "/mnt/a", "b": "/mnt/b"}
    response = api.post("/api/jobs", {**JOB, "checkpointing": {"store": "volume:shared-data"}}, format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])

    class Node:  # what _launch_payload reads of a JobNode
        pk, attempt, gpus = 7, 0, []

        def __init__(self, node):
            self.node_rank, self.machine_name = node["node_rank"], node["machine_name"]

    for node in body["nodes"]:
        launch = _launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(body), Node(node), "")
        path = f"/mnt/{node['machine_name']}"
        assert launch["volumes"] == [{"name": "shared-data", "path": path, "mount_path": "data",
                                      "access_mode": "ReadWriteMany", "machine": node["machine_name"]}]
        assert launch["checkpoint_url"] == f"file://{path}/torchyard-checkpoints/job-{job.pk}"


def test_a_job_asking_a_size_and_class_is_placed_where_the_agents_report_them(api):
    for name, free, storage_class in (("a", 2 << 40, "juicefs-sc"), ("b", 2 << 40, None), ("c", 1 << 30, "juicefs-sc")):
        machine, token = bring_online(name)
        declared = {"storage_class": storage_class} if storage_class else {}
        report_volumes(machine, token, [agent_volume("shared-data", f"/mnt/{name}") | {"free_bytes": free} | declared])
    asks = {**JOB, "resources": {"nodes": 1, "procs_per_node": 1},
            "volumes": [{"name": "shared-data", "size": 1 << 40, "storage_class": "juicefs-sc"}]}
    body = api.post("/api/jobs/plan", asks, format="json").json()
    assert [n["machine_name"] for n in body["nodes"]] == ["a"]
    assert reasons(body["skipped"])["b"].startswith("volume shared-data has no storage class, juicefs-sc asked")
    assert reasons(body["skipped"])["c"] == "volume shared-data has 1.0 GiB free, 1.0 TiB asked"
    response = api.post("/api/jobs", asks, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["volumes"][0] == {"name": "shared-data", "mount_path": "shared-data",
                                                          "access_mode": "ReadWriteMany", "size": 1 << 40,
                                                          "storage_class": "juicefs-sc"}
    bad = api.post("/api/jobs/plan", {**asks, "volumes": [{"name": "shared-data", "size": 0, "storage_class": "Bad"}]},
                   format="json")
    assert bad.status_code == 400 and set(bad.json()["volumes"]["0"]) == {"size", "storage_class"}

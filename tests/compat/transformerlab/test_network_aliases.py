"""TransformerLab's /api/network/* routes answer with the seed's payloads over the same services."""

import pytest
from torchyard_server.jobs.models import Job

pytestmark = pytest.mark.django_db

SEED_PLAN = {
    "plugin_name": "mlp_ddp",
    "config": {"batch_size": 64, "lr": 0.001},
    "resource_requirements": {"num_machines": 2, "gpus_per_machine": 0},
}


def test_machines_are_listed_added_and_removed_by_id_and_by_name(staff_api, two_machines):
    listed = staff_api.get("/api/network/machines").json()
    assert {m["name"] for m in listed} == {"gpu-a", "gpu-b"}
    assert set(listed[0]) >= {"id", "name", "host", "port", "status", "capabilities", "current_load"}
    added = staff_api.post("/api/network/machines", {"name": "box", "host": "10.1.1.1", "port": 8001}, format="json")
    assert added.status_code == 201
    assert staff_api.delete("/api/network/machines/by-name/box").status_code == 200
    assert staff_api.delete(f"/api/network/machines/{two_machines[0].pk}").status_code == 200
    assert [m["name"] for m in staff_api.get("/api/network/machines").json()] == ["gpu-b"]
    assert staff_api.delete("/api/network/machines/by-name/nope").status_code == 404


def test_status_aggregates_the_cluster(api, two_machines):
    body = api.get("/api/network/status").json()
    assert body["total_machines"] == 2 and body["online"] == 2 and body["total_cpus"] == 8


def test_plan_is_a_dry_run_and_dispatch_submits_the_whole_job(api, two_machines):
    plan = api.post("/api/network/distributed/plan", SEED_PLAN, format="json")
    assert plan.status_code == 200
    assert plan.json()["execution_plan"]["world_size"] == 2
    assert not Job.objects.exists()
    dispatched = api.post("/api/network/distributed/dispatch", SEED_PLAN, format="json")
    assert dispatched.status_code == 201
    job_id = dispatched.json()["job_id"]
    status = api.get(f"/api/network/distributed/status/{job_id}").json()
    assert status["status"] == "queued" and set(status) >= {"world_size", "nodes", "master_addr", "master_port"}
    stopped = api.post(f"/api/network/distributed/stop/{job_id}").json()
    assert stopped["status"] == "stopped"


def test_a_seed_request_with_an_unknown_plugin_or_too_many_machines_is_refused(api, two_machines):
    unknown = api.post("/api/network/distributed/plan", {**SEED_PLAN, "plugin_name": "llama_trainer"}, format="json")
    assert unknown.status_code == 400 and "plugin_name" in unknown.json()
    too_many = api.post("/api/network/distributed/plan",
                        {**SEED_PLAN, "resource_requirements": {"num_machines": 5}}, format="json")
    assert too_many.status_code == 400


def test_suggestions_rank_online_machines(api, two_machines):
    body = api.get("/api/tasks/distributed/suggest_machines?num_machines=2").json()
    assert sorted(body["suggested"]) == sorted(m.pk for m in two_machines) and body["enough"]
    assert api.get("/api/tasks/distributed/suggest_machines?num_machines=x").status_code == 400


def test_dispatch_job_pins_the_whole_job_to_one_machine(api, two_machines):
    target = two_machines[1]
    response = api.post(f"/api/network/machines/{target.pk}/dispatch_job",
                        {"name": "solo", "entrypoint": "examples/mlp_ddp.py",
                         "resources": {"nodes": 3, "procs_per_node": 2}}, format="json")
    assert response.status_code == 201
    job = Job.objects.get(pk=response.json()["job_id"])
    assert job.spec["resources"]["nodes"] == 1
    assert job.spec["placement"]["machines"] == ["gpu-b"]


def test_capabilities_describe_the_server_machine(api):
    body = api.get("/api/network/capabilities").json()
    assert body["capabilities"]["cpu_count"] >= 1 and "cpu_usage" in body["current_load"]


def test_a_seed_plan_without_resource_requirements_takes_their_defaults(api, two_machines):
    body = {key: value for key, value in SEED_PLAN.items() if key != "resource_requirements"}
    response = api.post("/api/network/distributed/plan", body, format="json")
    assert response.status_code == 200, response.content
    assert response.json()["execution_plan"]["world_size"] == 1  # one machine, one process

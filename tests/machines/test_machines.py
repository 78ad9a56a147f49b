import pytest
from factories import bring_online
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_authenticate, machine_record_heartbeat

pytestmark = pytest.mark.django_db


def test_registering_a_machine_returns_its_token_once(staff_api):
    response = staff_api.post("/api/machines", {"name": "box-1", "host": "10.0.0.5"}, format="json")
    assert response.status_code == 201
    body = response.json()
    assert body["status"] == "pending"
    assert body["token"].startswith(f"{body['id']}.")
    assert "torchyard agent --server" in body["agent_command"]
    assert "token" not in staff_api.get(f"/api/machines/{body['id']}").json()
    assert Machine.objects.get(pk=body["id"]).token_hash != body["token"]


def test_it_refuses_a_duplicate_or_malformed_machine(staff_api):
    staff_api.post("/api/machines", {"name": "box-1", "host": "10.0.0.5"}, format="json")
    duplicate = staff_api.post("/api/machines", {"name": "box-1", "host": "10.0.0.6"}, format="json")
    assert duplicate.status_code == 400 and "name" in duplicate.json()
    bad = staff_api.post("/api/machines", {"name": "has space", "host": "", "port": 70000}, format="json")
    assert bad.status_code == 400
    assert {"name", "host", "port"} <= set(bad.json())


def test_a_heartbeat_with_the_right_token_brings_a_machine_online_with_its_capabilities(db):
    machine, token = bring_online("box-2", gpus=[{"index": 0, "name": "A100", "memory_mb": 40960}])
    assert machine.status == "online"
    assert machine.capabilities["gpu_count"] == 1
    assert machine.last_heartbeat is not None


def test_a_heartbeat_with_a_wrong_token_is_ignored(db):
    machine, token = bring_online("box-3")
    Machine.objects.filter(pk=machine.pk).update(status="offline")
    forged = token.split(".")[0] + ".x" * 20
    assert machine_record_heartbeat(event={"machine": machine.pk, "token": forged}) is None
    assert Machine.objects.get(pk=machine.pk).status == "offline"
    assert machine_authenticate(token="garbage") is None


def test_the_agent_config_endpoint_answers_only_a_machine_token(anonymous, db):
    machine, token = bring_online("box-4")
    assert anonymous.get("/api/agent/config").status_code == 401
    ok = anonymous.get("/api/agent/config", HTTP_AUTHORIZATION=f"Machine {token}")
    assert ok.status_code == 200
    assert ok.json()["machine"]["name"] == "box-4"
    assert ok.json()["redis_url"].startswith("redis://")


def test_draining_a_machine_keeps_new_jobs_off_it(staff_api, two_machines):
    staff_api.patch(f"/api/machines/{two_machines[0].pk}", {"status": "draining"}, format="json")
    response = staff_api.post("/api/jobs/plan", {"name": "x", "entrypoint": "examples/mlp_ddp.py",
                                           "resources": {"nodes": 2}}, format="json")
    assert response.status_code == 400
    assert "(gpu-a draining)" in response.json()["resources"][0]


def test_a_drained_machine_that_drops_offline_comes_back_draining_and_busy_means_running_nodes(staff_api, db):
    from factories import bring_online

    machine, token = bring_online("gpu-d")
    beat = {"machine": machine.pk, "token": token, "capabilities": machine.capabilities}
    machine_record_heartbeat(event={**beat, "running": [{"run_dir": "/r/job-1/attempt-0/node-0", "pid": 1}]})
    assert Machine.objects.get(pk=machine.pk).status == "busy"
    machine_record_heartbeat(event={**beat, "running": []})
    assert Machine.objects.get(pk=machine.pk).status == "online"

    drained = staff_api.patch(f"/api/machines/{machine.pk}", {"status": "draining"}, format="json").json()
    assert drained["status"] == "draining" and drained["drained"] is True
    Machine.objects.filter(pk=machine.pk).update(status="offline")  # its agent went quiet
    machine_record_heartbeat(event=beat)
    assert Machine.objects.get(pk=machine.pk).status == "draining"
    assert staff_api.patch(f"/api/machines/{machine.pk}", {"status": "online"}, format="json").json()["status"] == "online"
    machine_record_heartbeat(event=beat)
    assert Machine.objects.get(pk=machine.pk).status == "online"

"""TransformerLab's remote-job routes and the distributed_jobs spellings of its first section, on the same
services as the canonical API, each answer checked field by field; the per-rank dispatch; the ping's
round trip to a real agent (a `torchyard agent` process on this test's Redis)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import redis
from clients import signed_in
from django.conf import settings as django_settings
from torchyard import protocol
from torchyard_server.compat.transformerlab.models import RankDispatch
from torchyard_server.jobs.control.queue_pass import job_schedule
from torchyard_server.jobs.models import Job
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_create
from torchyard_server.projects.models import Membership, Project

from .status_routes import STATUS_FIELDS

pytestmark = pytest.mark.django_db

SPEC = {"name": "remote", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "20"],
        "resources": {"nodes": 2, "procs_per_node": 2}, "hyperparameters": {"batch_size": 64}}
NODE_FIELDS = {"machine_id", "machine_name", "rank", "ranks", "status", "start_time", "end_time", "progress"}
SEED_CONFIG = {"plugin_name": "mlp_ddp", "config": {"batch_size": 64, "lr": 0.001}}


def scheduled_job(api, spec=SPEC) -> Job:
    """A submitted job, planned and its nodes made (the controller's step), as the routes see it."""
    job_id = api.post("/api/jobs", spec, format="json").json()["id"]
    job_schedule(job_id=job_id)
    return Job.objects.get(pk=job_id)


def test_job_status_on_a_machine_shows_the_job_and_its_nodes_there(api, two_machines):
    job = scheduled_job(api)
    assert job.status == "dispatching"
    for machine in two_machines:
        response = api.get(f"/api/network/machines/{machine.pk}/job_status/{job.pk}")
        assert response.status_code == 200, response.content
        body = response.json()
        assert set(body) == STATUS_FIELDS
        assert (body["job_id"], body["status"], body["world_size"], body["attempt"]) == (job.pk, "dispatching", 4, 0)
        assert (body["master_addr"], body["master_port"]) == (job.master_addr, job.master_port)
        assert body["status_reason"] == "launching 2 node(s), world size 4"
        assert body["seed_job_id"] is None and body["waiting_for_ranks"] == []
        [node] = body["nodes"]
        assert set(node) == NODE_FIELDS
        placed = job.nodes.get(machine=machine)
        assert (node["machine_id"], node["machine_name"], node["rank"]) == (machine.pk, machine.name, placed.node_rank)
        assert node["ranks"] == [placed.rank_start, placed.rank_end]
        assert (node["status"], node["start_time"], node["end_time"], node["progress"]) == ("launching", None, None, None)


def test_a_job_with_nothing_on_the_machine_or_hidden_from_the_user_is_a_404(api, two_machines, django_user_model):
    job = scheduled_job(api, {**SPEC, "resources": {"nodes": 1, "procs_per_node": 1}})
    elsewhere = next(m for m in two_machines if not job.nodes.filter(machine=m).exists())
    assert api.get(f"/api/network/machines/{elsewhere.pk}/job_status/{job.pk}").status_code == 404
    assert api.post(f"/api/network/machines/{elsewhere.pk}/stop_job/{job.pk}").status_code == 404
    assert api.get(f"/api/network/machines/999999/job_status/{job.pk}").status_code == 404
    oz = django_user_model.objects.create_user("oz")
    Membership.objects.filter(user=oz).delete()
    placed = job.nodes.get().machine_id
    assert signed_in(oz).get(f"/api/network/machines/{placed}/job_status/{job.pk}").status_code == 404


def test_stop_job_on_a_machine_stops_the_whole_job_as_the_canonical_stop(api, two_machines, django_user_model):
    job = scheduled_job(api)
    machine = two_machines[0]
    mia = django_user_model.objects.create_user("mia")  # a member of the default project, not the owner
    assert signed_in(mia).post(f"/api/network/machines/{machine.pk}/stop_job/{job.pk}").status_code == 403
    response = api.post(f"/api/network/machines/{machine.pk}/stop_job/{job.pk}")
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == STATUS_FIELDS and body["status"] == "stopping" and body["status_reason"] == "stopped by alice"
    assert [n["machine_id"] for n in body["nodes"]] == [machine.pk]
    job.refresh_from_db()
    assert job.status == "stopping" and set(job.nodes.values_list("status", flat=True)) == {"launching"}


def test_a_job_pinned_to_a_machine_is_found_there_before_it_has_nodes(api, two_machines):
    target = two_machines[1]
    job_id = api.post(f"/api/network/machines/{target.pk}/dispatch_job", SPEC, format="json").json()["job_id"]
    body = api.get(f"/api/network/machines/{target.pk}/job_status/{job_id}").json()
    assert body["status"] == "queued" and body["nodes"] == []
    # dispatch_job puts every process of the job on the machine: one node of 2 x 2.
    job = Job.objects.get(pk=job_id)
    assert job.spec["resources"]["nodes"] == 1 and job.spec["resources"]["procs_per_node"] == 4
    assert job.spec["placement"]["machines"] == [target.name]


def test_execute_job_runs_a_jobspec_where_the_planner_or_the_caller_says(api, two_machines):
    response = api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": "remote-7"}, format="json")
    assert response.status_code == 201, response.content
    body = response.json()
    assert set(body) == STATUS_FIELDS
    assert body["status"] == "queued" and body["seed_job_id"] == "remote-7" and body["attempt"] == 0
    job = Job.objects.get(pk=body["job_id"])
    assert job.spec["resources"]["nodes"] == 2 and job.spec["placement"]["machines"] == []

    by_host = api.post("/api/network/execute_job", {"job_data": SPEC, "target_machine": two_machines[0].host},
                       format="json")
    assert by_host.status_code == 201, by_host.content
    pinned = Job.objects.get(pk=by_host.json()["job_id"])
    assert pinned.spec["placement"]["machines"] == [two_machines[0].name] and by_host.json()["seed_job_id"] is None


def test_execute_job_refuses_bad_input_naming_the_field(api, two_machines):
    bad = api.post("/api/network/execute_job", {"job_data": {**SPEC, "resources": {"nodes": 0}}}, format="json")
    assert bad.status_code == 400 and "nodes" in bad.json()["job_data"]["resources"]
    missing = api.post("/api/network/execute_job", {"job_id": "x"}, format="json")
    assert missing.status_code == 400 and "job_data" in missing.json()
    nowhere = api.post("/api/network/execute_job", {"job_data": SPEC, "target_machine": "no-such"}, format="json")
    assert nowhere.status_code == 400 and "no-such" in nowhere.json()["target_machine"][0]
    assert not Job.objects.exists()


def test_local_job_status_is_the_jobs_status(api, two_machines):
    job = scheduled_job(api)
    body = api.get(f"/api/network/local_job_status/{job.pk}").json()
    assert set(body) == STATUS_FIELDS
    assert (body["job_id"], body["status"], body["world_size"]) == (job.pk, "dispatching", 4)
    assert sorted(n["rank"] for n in body["nodes"]) == [0, 1]
    assert api.get("/api/network/local_job_status/999999").status_code == 404


def test_the_distributed_jobs_spellings_plan_dispatch_and_report_as_the_distributed_ones(api, two_machines):
    seed = {**SEED_CONFIG, "resource_requirements": {"num_machines": 2}}
    plan = api.post("/api/network/distributed_jobs/plan", seed, format="json")
    assert plan.status_code == 200
    # The planned job is kept as a task: the plan's job_id is plan-<its id> (test_transformerlab_job_ids.py).
    assert set(plan.json()) == {"job_id", "task_id", "execution_plan", "spec"}
    assert plan.json()["job_id"] == f"plan-{plan.json()['task_id']}"
    assert plan.json()["execution_plan"]["world_size"] == 2 and not Job.objects.exists()
    dispatched = api.post("/api/network/distributed_jobs/dispatch", seed, format="json")
    assert dispatched.status_code == 201
    job_id = dispatched.json()["job_id"]
    status = api.get(f"/api/network/distributed_jobs/{job_id}/status")
    assert status.status_code == 200 and status.json() == api.get(f"/api/network/distributed/status/{job_id}").json()
    assert set(status.json()) == STATUS_FIELDS and status.json()["status"] == "queued"
    assert api.get("/api/network/distributed_jobs/999999/status").status_code == 404
    assert api.get("/api/network/distributed_jobs/dist_job_none/status").status_code == 404


def rank_body(rank: int, machine: Machine, **changes) -> dict:
    """TransformerLab's dispatch body, as its browser sent one per rank (less master_addr and
    master_port: Torchyard picks the master, test_transformerlab_job_ids.py)."""
    return {"job_id": "dist_job_123", "target_machine": machine.host, "rank": rank, "world_size": 2,
            **SEED_CONFIG, **changes}


def test_the_seeds_per_rank_dispatch_submits_the_job_once_every_rank_has_its_machine(api, two_machines):
    a, b = two_machines
    first = api.post("/api/network/distributed_jobs/dispatch", rank_body(1, a), format="json")
    assert first.status_code == 202, first.content
    waiting = first.json()
    assert set(waiting) == STATUS_FIELDS
    assert (waiting["job_id"], waiting["seed_job_id"], waiting["status"]) == (None, "dist_job_123", "dispatching")
    assert waiting["waiting_for_ranks"] == [0] and waiting["world_size"] == 2 and waiting["master_addr"] == ""
    assert waiting["status_reason"] == "1 of 2 ranks dispatched; waiting for rank(s) 0"
    [node] = waiting["nodes"]
    assert set(node) == NODE_FIELDS
    assert (node["machine_id"], node["machine_name"], node["rank"], node["ranks"], node["status"]) == (a.pk, a.name, 1, [1, 1], "pending")
    assert not Job.objects.exists()
    assert api.get("/api/network/distributed_jobs/dist_job_123/status").json() == waiting

    last = api.post("/api/network/distributed/dispatch", rank_body(0, b), format="json")
    assert last.status_code == 201, last.content
    body = last.json()
    assert body["seed_job_id"] == "dist_job_123" and body["status"] == "queued" and body["waiting_for_ranks"] == []
    job = Job.objects.get(pk=body["job_id"])
    # Each rank on the machine it named, rank 0 first (the master); the job named after the caller's id.
    assert job.name == "dist_job_123" and job.spec["placement"]["machines"] == [b.name, a.name]
    assert job.spec["hyperparameters"] == SEED_CONFIG["config"] and job.spec["resources"]["nodes"] == 2
    assert api.get("/api/network/distributed_jobs/dist_job_123/status").json() == body

    # A rank sent again after the job went: the same answer, no second job.
    again = api.post("/api/network/distributed_jobs/dispatch", rank_body(0, b), format="json")
    assert again.status_code == 200 and again.json()["job_id"] == job.pk and Job.objects.count() == 1
    moved = api.post("/api/network/distributed_jobs/dispatch", rank_body(0, a), format="json")
    assert moved.status_code == 400 and "dispatched already" in moved.json()["job_id"][0]


def test_per_rank_bodies_that_disagree_or_name_nothing_are_refused(api, two_machines):
    a, b = two_machines
    assert api.post("/api/network/distributed_jobs/dispatch", rank_body(0, a), format="json").status_code == 202
    other = api.post("/api/network/distributed_jobs/dispatch", rank_body(1, b, config={"lr": 1.0}), format="json")
    assert other.status_code == 400 and "every rank of one job sends the same" in other.json()["job_id"][0]
    too_high = api.post("/api/network/distributed_jobs/dispatch", rank_body(2, b), format="json")
    assert too_high.status_code == 400 and "rank" in too_high.json()
    nowhere = api.post("/api/network/distributed_jobs/dispatch", rank_body(1, b, target_machine="10.250.0.1"), format="json")
    assert nowhere.status_code == 400 and "10.250.0.1" in nowhere.json()["target_machine"][0]
    unknown = api.post("/api/network/distributed_jobs/dispatch", rank_body(1, b, plugin_name="llama_trainer"), format="json")
    assert unknown.status_code == 400 and "plugin_name" in unknown.json()
    assert not Job.objects.exists() and RankDispatch.objects.count() == 1


def test_a_rank_that_completes_a_job_the_machines_cannot_hold_is_refused_and_may_be_sent_again(api, two_machines):
    a, b = two_machines
    Machine.objects.filter(pk=b.pk).update(status="offline")
    api.post("/api/network/distributed_jobs/dispatch", rank_body(0, a), format="json")
    refused = api.post("/api/network/distributed_jobs/dispatch", rank_body(1, b), format="json")
    assert refused.status_code == 400 and "offline)" in refused.json()["detail"]
    assert not Job.objects.exists() and list(RankDispatch.objects.values_list("rank", flat=True)) == [0]
    Machine.objects.filter(pk=b.pk).update(status="online")
    assert api.post("/api/network/distributed_jobs/dispatch", rank_body(1, b), format="json").status_code == 201


def test_per_rank_dispatches_are_each_users_own_and_need_the_right_to_submit(api, two_machines, django_user_model):
    a, b = two_machines
    api.post("/api/network/distributed_jobs/dispatch", rank_body(0, a), format="json")
    bob = signed_in(django_user_model.objects.create_user("bob"))
    # bob's dist_job_123 is his own: his rank 1 completes nothing of alice's.
    assert bob.post("/api/network/distributed_jobs/dispatch", rank_body(1, b), format="json").status_code == 202
    assert bob.get("/api/network/distributed_jobs/dist_job_123/status").json()["waiting_for_ranks"] == [0]
    vic = django_user_model.objects.create_user("vic")
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=vic, role="viewer")
    viewer = signed_in(vic).post("/api/network/distributed_jobs/dispatch", rank_body(0, a, project="lab"), format="json")
    assert viewer.status_code == 403 and not RankDispatch.objects.filter(owner=vic).exists()


# --- ping: a round trip to a real agent -----------------------------------------------------------
@pytest.fixture
def live_agent(tmp_path: Path):
    """A registered machine with its agent running (`torchyard agent --redis-url`), ended by PID."""
    machine, token = machine_create(name="pinged", host="127.0.0.1")
    log = open(tmp_path / "agent.log", "wb")  # noqa: SIM115 - closed below
    agent = subprocess.Popen(
        [str(Path(sys.executable).parent / "torchyard"), "agent", "--token", token,
         "--redis-url", django_settings.REDIS_URL, "--work-dir", str(tmp_path / "agent"), "--concurrency", "1"],
        stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield machine
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        log.close()
        redis.Redis.from_url(django_settings.REDIS_URL).delete(
            protocol.machine_liveness_stream(machine.pk), protocol.machine_event_stream(machine.pk))


def test_ping_answers_the_round_trip_to_the_agent_in_ms(api, live_agent, settings):
    settings.PING_TIMEOUT = 2.0
    url = f"/api/network/machines/{live_agent.pk}/ping"
    deadline = time.monotonic() + 90  # the agent's Celery worker is starting
    body = api.post(url).json()
    while not body["reachable"] and time.monotonic() < deadline:
        body = api.post(url).json()
    assert set(body) == {"machine_id", "name", "reachable", "rtt_ms", "timeout_s", "detail", "status", "last_heartbeat"}
    assert body["reachable"], body
    assert (body["machine_id"], body["name"], body["timeout_s"]) == (live_agent.pk, "pinged", 2.0)
    assert isinstance(body["rtt_ms"], float) and 0 < body["rtt_ms"] < 2000
    assert body["detail"] == f"answered in {body['rtt_ms']} ms"
    checked = api.post("/api/network/health-check").json()
    [mine] = [r for r in checked["results"] if r["machine_id"] == live_agent.pk]
    assert mine["reachable"] and mine["rtt_ms"] > 0 and checked["healthy"] == 1


def test_a_machine_whose_agent_does_not_answer_is_a_clear_timeout(api, settings):
    settings.PING_TIMEOUT = 0.5
    machine, _ = machine_create(name="silent", host="10.0.0.77")
    body = api.post(f"/api/network/machines/{machine.pk}/ping").json()
    assert (body["reachable"], body["rtt_ms"], body["timeout_s"]) == (False, None, 0.5)
    assert body["detail"] == "no answer from its agent within 0.5 s"
    assert api.post("/api/network/machines/999999/ping").status_code == 404

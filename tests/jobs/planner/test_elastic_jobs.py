"""Elastic jobs (resources.nodes "MIN:MAX"): the spec, the planner with a range, the shrink when a
node is lost and recovery re-plans, and the grow at a committed checkpoint."""

from __future__ import annotations

import pytest
from factories import bring_online
from torchyard import protocol
from torchyard_server.celery import app as celery_app
from torchyard_server.checkpoints.services import checkpoint_record
from torchyard_server.jobs.control import membership
from torchyard_server.jobs.control.queue_pass import job_schedule, jobs_schedule_queued
from torchyard_server.jobs.control.recovery import job_recover
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.supervision import _mark_lost
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.placement.candidates import Candidate, PlanError
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan

pytestmark = pytest.mark.django_db(transaction=True)

J, N = Job.Status, JobNode.Status


def elastic(nodes="2:3", **fields) -> dict:
    return {"name": "e", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": nodes, "procs_per_node": 1},
            "hyperparameters": {"batch_size": 12, "lr": 0.01}, "scaling": {"mode": "keep_global_batch"}, **fields}


# --- the spec -------------------------------------------------------------------------------------
def test_a_range_is_stored_as_its_most_nodes_and_its_least(api, two_machines):
    response = api.post("/api/jobs", elastic("2:3"), format="json")
    assert response.status_code == 201, response.json()
    resources = response.json()["spec"]["resources"]
    assert resources["nodes"] == 3 and resources["min_nodes"] == 2
    # The stored shape goes back in as it came out (a resubmitted spec).
    again = api.post("/api/jobs", {**elastic(), "resources": {"nodes": 3, "min_nodes": 2, "procs_per_node": 1}},
                     format="json")
    assert again.status_code == 201, again.json()
    assert again.json()["spec"]["resources"]["min_nodes"] == 2


@pytest.mark.parametrize("nodes, count", [("2", 2), (" 2 ", 2), ("2:2", 2), (2, 2)])
def test_a_single_count_is_a_plain_job(api, two_machines, nodes, count):
    response = api.post("/api/jobs", elastic(nodes), format="json")
    assert response.status_code == 201, response.json()
    resources = response.json()["spec"]["resources"]
    assert resources["nodes"] == count and "min_nodes" not in resources


@pytest.mark.parametrize("nodes, says", [
    ("0:3", "MIN must be at least 1"), ("3:2", "MIN (3) exceeds MAX (2)"), ("a:b", "MIN:MAX"), ("2:", "MIN:MAX"),
    ("2:3:4", "MIN:MAX"), (2.5, "MIN:MAX"), (True, "MIN:MAX"), ("1:999", "between 1 and 256"), ([2, 3], "MIN:MAX"),
])
def test_a_bad_range_is_a_400_naming_resources_nodes(api, two_machines, nodes, says):
    response = api.post("/api/jobs", elastic(nodes), format="json")
    assert response.status_code == 400, response.json()
    assert says in " ".join(response.json()["resources"]["nodes"])


def test_min_nodes_above_nodes_or_with_workers_is_refused(api, two_machines):
    above = api.post("/api/jobs", {**elastic(), "resources": {"nodes": 2, "min_nodes": 3}}, format="json")
    assert above.status_code == 400 and "exceeds" in above.json()["resources"]["nodes"][0]
    workers = api.post("/api/jobs", {**elastic(), "resources": {"workers": 2, "min_nodes": 1}}, format="json")
    assert workers.status_code == 400 and "min_nodes" in workers.json()["resources"]


def test_every_world_size_of_the_range_must_take_the_hyperparameters(api, two_machines):
    # keep_global_batch: 8 divides over 2 processes, not over 3.
    response = api.post("/api/jobs", elastic(hyperparameters={"batch_size": 8}), format="json")
    assert response.status_code == 400
    assert response.json()["hyperparameters"] == [
        "with 3 nodes of the range 2:3: keep_global_batch: batch_size 8 does not divide evenly over 3 processes; "
        "choose a multiple of 3 (e.g. 6 or 9); the range's sizes that take it: 2 node(s)"]
    none = api.post("/api/jobs", elastic(hyperparameters={"batch_size": 7}), format="json")
    assert none.status_code == 400 and none.json()["hyperparameters"][0].endswith("no size of the range takes it")


@pytest.mark.parametrize(("entrypoint", "nodes", "procs", "batch"), [
    ("examples/mlp_ddp.py", "2:3", 1, 66),  # 64 is the MLP's default: 2 divides it, 3 does not
    ("examples/mlp_fsdp.py", "2:4", 2, 72),  # 4, 6 and 8 processes
    ("examples/char_gpt.py", "1:3", 1, 36),
    ("examples/mlp_ddp.py", "1:2", 2, None),  # 2 and 4 processes: 64 as it is
])
def test_a_built_in_recipe_given_no_batch_runs_elastic_as_it_is(api, two_machines, entrypoint, nodes, procs, batch):
    """Its default batch rounded up to a multiple of every size of the range: before, the MLP's
    `2:3` with its default 64 was accepted and crash-looped on 3 nodes until its restarts were spent
    ("batch_size 64 does not divide evenly over 3 processes")."""
    spec = {"name": "e", "entrypoint": entrypoint, "resources": {"nodes": nodes, "procs_per_node": procs},
            "scaling": {"mode": "keep_global_batch"}}
    response = api.post("/api/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["hyperparameters"] == ({"batch_size": batch} if batch else {})
    low, high = (int(n) for n in nodes.split(":"))
    assert all((batch or 64) % (count * procs) == 0 for count in range(low, high + 1))
    # Other scaling modes do not divide the batch: nothing to round.
    scaled = api.post("/api/jobs", {**spec, "scaling": {"mode": "scale_global_batch"}}, format="json").json()
    assert scaled["spec"]["hyperparameters"] == {}


@pytest.mark.parametrize("interval", ["soon", None, -1, [300]])
def test_a_resize_interval_that_is_not_a_number_is_a_400(api, two_machines, interval):
    response = api.post("/api/jobs", elastic(elastic={"min_interval": interval}), format="json")
    assert response.status_code == 400
    assert "min_interval" in response.json()["elastic"]


def test_the_resize_interval_is_kept(api, two_machines):
    response = api.post("/api/jobs", elastic(elastic={"min_interval": 60}), format="json")
    assert response.status_code == 201 and response.json()["spec"]["elastic"] == {"min_interval": 60.0}


def test_the_plan_preview_shows_the_range_and_the_world_it_starts_with(api, two_machines):
    response = api.post("/api/jobs/plan", elastic("1:3"), format="json")
    assert response.status_code == 200, response.json()
    plan = response.json()
    assert plan["nodes_range"] == [1, 3] and plan["nnodes"] == 2 and plan["world_size"] == 2
    assert plan["hyperparameters"]["batch_size"] == 6 and plan["hyperparameters"]["global_batch_size"] == 12
    plain = api.post("/api/jobs/plan", elastic(2), format="json").json()
    assert "nodes_range" not in plain


# --- the planner ----------------------------------------------------------------------------------
def spec_of(nodes: int, min_nodes: int, procs: int = 1) -> dict:
    return {"resources": {"nodes": nodes, "min_nodes": min_nodes, "procs_per_node": procs, "gpus_per_node": 0,
                          "min_gpu_memory": 0},
            "placement": {"policy": "pack", "machines": [], "oversubscribe": False},
            "distributed": {"backend": "auto"}, "hyperparameters": {}, "scaling": {"mode": "none"}}


def plan(spec: dict, machines: list[Candidate]) -> Plan:
    return plan_job(JobSpec.from_json(spec), machines, pick_port=lambda m: 29500)


def cpus(*busy: int) -> list[Candidate]:
    return [Candidate(i + 1, f"m{i + 1}", f"h{i + 1}", "online", cpu_count=2, busy_procs=b, live_nodes=int(b > 0))
            for i, b in enumerate(busy)]


def test_the_planner_places_the_most_nodes_when_they_fit():
    p = plan(spec_of(3, 2), cpus(0, 0, 0, 0))
    assert p.nnodes == 3 and p.world_size == 3 and p.nodes_range == [2, 3]


def test_the_planner_places_fewer_down_to_the_least():
    # m3 is full: two machines have room.
    p = plan(spec_of(3, 2), cpus(0, 0, 2))
    assert p.nnodes == 2 and [n.machine_name for n in p.nodes] == ["m1", "m2"]
    assert any(s["machine_name"] == "m3" and s["reason"].startswith("busy") for s in p.skipped)


def test_under_the_least_the_job_waits_saying_why():
    with pytest.raises(PlanError) as busy:
        plan(spec_of(3, 2), cpus(0, 2, 2))
    assert busy.value.kind == "busy"
    assert busy.value.reason.startswith("waiting for at least 2 machines with room for 1 more process: 1 now")
    with pytest.raises(PlanError) as capacity:
        plan(spec_of(3, 2), cpus(0))
    assert capacity.value.kind == "capacity"
    assert capacity.value.reason.startswith("needs at least 2 online machines; 1 online machine(s) can hold a node")


def test_versions_that_differ_leave_an_elastic_job_the_largest_agreeing_group():
    machines = cpus(0, 0, 0)
    for machine, torch in zip(machines, ["2.4.0", "2.4.0", "2.3.0"], strict=True):
        machine.torch_version, machine.python_version = torch, "3.11.9"
    p = plan(spec_of(3, 2), machines)
    assert [n.machine_name for n in p.nodes] == ["m1", "m2"]
    assert any(s["machine_name"] == "m3" and "versions differ" in s["reason"] for s in p.skipped)


# --- shrink and grow through the controller -------------------------------------------------------
@pytest.fixture
def sent(monkeypatch):
    messages: list[tuple[str, dict]] = []
    record = lambda name, **kw: messages.append((name, kw))  # noqa: E731
    monkeypatch.setattr(celery_app, "send_task", record)
    monkeypatch.setattr(membership.celery_app, "send_task", record)
    return messages


def launched(job: Job) -> list[JobNode]:
    return list(JobNode.objects.filter(job=job, attempt=job.attempt).order_by("node_rank"))


def run_all(job: Job, capture) -> None:
    with capture(execute=True):
        for node in launched(job):
            node_report_state(event={"node": node.pk, "status": protocol.NODE_RUNNING, "pid": 1})
    job.refresh_from_db()
    assert job.status == J.RUNNING


def test_a_lost_node_shrinks_the_job_onto_the_machines_left(api, sent, django_capture_on_commit_callbacks):
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        bring_online(name)
    response = api.post("/api/jobs", elastic("2:3"), format="json")
    assert response.status_code == 201, response.json()
    job = Job.objects.get(pk=response.json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=job.pk)
    job.refresh_from_db()
    assert job.world_size == 3 and job.plan["nnodes"] == 3
    run_all(job, django_capture_on_commit_callbacks)
    lost = launched(job)[2]
    with django_capture_on_commit_callbacks(execute=True):
        _mark_lost(lost, f"node 2 ({lost.machine_name}) lost: no heartbeat for 10s")
        for node in launched(job)[:2]:
            node_report_state(event={"node": node.pk, "status": protocol.NODE_STOPPED, "reason": "stopped"})
    job.refresh_from_db()
    assert job.status == J.RECOVERING
    with django_capture_on_commit_callbacks(execute=True):
        job_recover(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == J.DISPATCHING and job.attempt == 1
    assert job.status_reason.startswith(f"shrunk from 3 to 2 nodes: machine {lost.machine_name} lost; "
                                        "launching 2 node(s), world size 2, attempt 1")
    assert job.world_size == 2 and job.plan["nnodes"] == 2 and job.plan["nodes_range"] == [2, 3]
    assert lost.machine_name not in [n.machine_name for n in launched(job)]
    # keep_global_batch: each rank takes 12 / 2 now, the global batch unchanged.
    assert job.plan["hyperparameters"]["batch_size"] == 6 and job.plan["hyperparameters"]["global_batch_size"] == 12
    launches = [kw for name, kw in sent if name == protocol.TASK_LAUNCH_NODE]
    assert len(launches) == 3 + 2


def test_a_shrink_below_the_least_waits_in_the_queue(api, sent, django_capture_on_commit_callbacks):
    for name in ("gpu-a", "gpu-b"):
        bring_online(name)
    job = Job.objects.get(pk=api.post("/api/jobs", elastic("2:3"), format="json").json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=job.pk)
    job.refresh_from_db()
    assert job.plan["nnodes"] == 2
    run_all(job, django_capture_on_commit_callbacks)
    first, second = launched(job)
    with django_capture_on_commit_callbacks(execute=True):
        _mark_lost(second, "node 1 lost: no heartbeat for 10s")
        node_report_state(event={"node": first.pk, "status": protocol.NODE_STOPPED, "reason": "stopped"})
        job_recover(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == J.QUEUED
    assert job.status_reason.startswith("recovery: needs at least 2 online machines")


def test_a_job_below_its_most_grows_at_a_checkpoint_commit(api, sent, django_capture_on_commit_callbacks):
    for name in ("gpu-a", "gpu-b"):
        bring_online(name)
    job = Job.objects.get(pk=api.post("/api/jobs", elastic("2:3", elastic={"min_interval": 0}), format="json")
                          .json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=job.pk)
    run_all(job, django_capture_on_commit_callbacks)
    checkpoint = {"type": protocol.CHECKPOINT, "job": job.pk, "attempt": 0, "step": 10, "uri": "file:///c/10"}
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_record(event=checkpoint)
    job.refresh_from_db()
    assert job.status == J.RUNNING  # no machine to grow onto
    bring_online("gpu-c")
    sent.clear()
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_record(event={**checkpoint, "step": 20, "uri": "file:///c/20"})
    job.refresh_from_db()
    assert job.status == J.RECOVERING and job.restarts == 0
    assert job.status_reason.startswith("growing from 2 to 3 nodes")
    assert [name for name, _ in sent].count(protocol.TASK_STOP_NODE) == 2
    with django_capture_on_commit_callbacks(execute=True):
        for node in launched(job):
            node_report_state(event={"node": node.pk, "status": protocol.NODE_STOPPED, "reason": "stopped"})
        job_recover(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == J.DISPATCHING and job.attempt == 1 and job.world_size == 3
    assert job.status_reason.startswith("grown from 2 to 3 nodes; launching 3 node(s), world size 3, attempt 1, "
                                        "resuming from file:///c/20")


def test_a_job_grows_no_more_often_than_its_interval(api, sent, django_capture_on_commit_callbacks):
    for name in ("gpu-a", "gpu-b"):
        bring_online(name)
    job = Job.objects.get(pk=api.post("/api/jobs", elastic("2:3"), format="json").json()["id"])  # 300 s
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=job.pk)
    run_all(job, django_capture_on_commit_callbacks)
    bring_online("gpu-c")
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_record(event={"job": job.pk, "attempt": 0, "step": 10, "uri": "file:///c/10"})
    job.refresh_from_db()
    assert job.status == J.RUNNING
    # An old checkpoint of another attempt never resizes the current one.
    JobNode.objects.filter(job=job).update(created_at=job.created_at.replace(year=2000))
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_record(event={"job": job.pk, "attempt": 5, "step": 10, "uri": "file:///c/11"})
    job.refresh_from_db()
    assert job.status == J.RUNNING
    with django_capture_on_commit_callbacks(execute=True):
        checkpoint_record(event={"job": job.pk, "attempt": 0, "step": 20, "uri": "file:///c/20"})
    job.refresh_from_db()
    assert job.status == J.RECOVERING


def test_a_template_put_on_one_machine_is_no_longer_a_range():
    from torchyard_server.templates.services import on_one_machine

    one = on_one_machine(spec_of(3, 2, procs=2), "m1")
    assert one["resources"]["nodes"] == 1 and one["resources"]["procs_per_node"] == 6
    assert "min_nodes" not in one["resources"]
    assert plan(one, cpus(0, 0)).nnodes == 1


def test_an_elastic_job_short_of_its_least_machines_waits_queued_until_they_join(
        api, sent, django_capture_on_commit_callbacks):
    bring_online("gpu-a")
    response = api.post("/api/jobs", elastic("2:3"), format="json")
    assert response.status_code == 201, response.json()  # a fixed-size job would be refused (400)
    job = Job.objects.get(pk=response.json()["id"])
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=job.pk)
    job.refresh_from_db()
    assert job.status == J.QUEUED
    assert job.status_reason.startswith("needs at least 2 online machines; 1 online machine(s) can hold a node")
    bring_online("gpu-b")
    with django_capture_on_commit_callbacks(execute=True):
        jobs_schedule_queued()
    job.refresh_from_db()
    assert job.status == J.DISPATCHING and job.plan["nnodes"] == 2
    fixed = api.post("/api/jobs", {**elastic(3)}, format="json")
    assert fixed.status_code == 400

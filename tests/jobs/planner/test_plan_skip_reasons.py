"""The plan names, for every machine it did not choose, why: the planner on snapshots, then
`POST /api/jobs/plan` and the seed's plan aliases on machines in the database."""

from __future__ import annotations

import pytest
from factories import bring_online
from torchyard_server.jobs.placement.candidates import Candidate, PlanError
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_mark_suspect, machine_update


def gpus(count: int, memory_mb: int = 24_000) -> list[dict]:
    return [{"index": i, "name": "GPU", "memory_mb": memory_mb} for i in range(count)]


def spec(**resources) -> dict:
    base = {"resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0},
            "placement": {"policy": "pack", "machines": [], "oversubscribe": False},
            "distributed": {"backend": "auto"}, "hyperparameters": {}, "scaling": {"mode": "none"}}
    base["resources"].update(resources)
    return base


def plan(s: dict, machines: list[Candidate]) -> Plan:
    return plan_job(JobSpec.from_json(s), machines, pick_port=lambda m: 29500)


def reasons(skipped: list[dict]) -> dict[str, str]:
    return {entry["machine_name"]: entry["reason"] for entry in skipped}


def test_every_machine_not_chosen_is_named_with_why():
    machines = [
        Candidate(1, "chosen", "h1", "online", gpus=gpus(4)),
        Candidate(2, "down", "h2", "offline", gpus=gpus(8)),
        Candidate(3, "drained", "h3", "draining", gpus=gpus(8)),
        Candidate(4, "lost-a-node", "h4", "offline", gpus=gpus(8), suspect=True),
        Candidate(5, "new", "h5", "pending"),
        Candidate(6, "half-busy", "h6", "busy", gpus=gpus(4), busy_gpus={0, 1}),
        Candidate(7, "small-gpus", "h7", "online", gpus=gpus(8, 16_000)),
        Candidate(8, "two-gpus", "h8", "online", gpus=gpus(2)),
        Candidate(9, "mixed", "h9", "online", gpus=gpus(2) + [{"index": 2, "name": "GPU", "memory_mb": 8_000},
                                                              {"index": 3, "name": "GPU", "memory_mb": 8_000}]),
    ]
    p = plan(spec(gpus_per_node=4, procs_per_node=4, min_gpu_memory=20 * 1000), machines)
    assert [n.machine_name for n in p.nodes] == ["chosen"]
    assert reasons(p.skipped) == {
        "down": "offline",
        "drained": "draining",
        "lost-a-node": "suspect",
        "new": "pending",
        "half-busy": "2 GPUs free, 4 asked",
        "small-gpus": "less than 20 GB per GPU",
        "two-gpus": "2 GPUs, 4 asked",
        "mixed": "2 GPUs of 20 GB or more, 4 asked",
    }
    # Sorted by name, each with its id.
    assert [e["machine_name"] for e in p.skipped] == sorted(reasons(p.skipped))
    assert {e["machine_name"]: e["machine_id"] for e in p.skipped}["down"] == 2


def test_memory_is_said_as_a_user_writes_it_in_either_unit():
    small = [Candidate(1, "small", "h1", "online", gpus=gpus(1, 16_000)), Candidate(2, "big", "h2", "online", gpus=gpus(1, 81_920))]
    for asked in (40_960, 40_000):
        p = plan(spec(gpus_per_node=1, min_gpu_memory=asked), small)
        assert reasons(p.skipped) == {"small": "less than 40 GB per GPU"}
    assert reasons(plan(spec(gpus_per_node=1, min_gpu_memory=20_500), small).skipped) == {
        "small": "less than 20500 MB per GPU"}


def test_a_busy_cpu_machine_says_how_busy_and_a_machine_left_over_is_not_needed():
    machines = [Candidate(1, "full", "h1", "busy", cpu_count=4, live_nodes=1, busy_procs=4),
                Candidate(2, "idle-a", "h2", "online", cpu_count=8),
                Candidate(3, "idle-b", "h3", "online", cpu_count=8)]
    p = plan(spec(procs_per_node=2), machines)
    chosen = p.nodes[0].machine_name
    spare = ({"idle-a", "idle-b"} - {chosen}).pop()
    assert reasons(p.skipped) == {"full": "busy: 4 processes of 4 cores, 2 more asked",
                                     spare: "not needed: the job's 1 node went to machines before it"}


def test_machines_whose_versions_differ_from_the_chosen_ones_say_so():
    machines = [Candidate(i, name, f"h{i}", "online", cpu_count=8, torch_version=torch, python_version="3.11.7")
                for i, (name, torch) in enumerate([("a", "2.13.0"), ("b", "2.13.0"), ("old", "2.4.1")], start=1)]
    p = plan(spec(nodes=2), machines)
    assert sorted(n.machine_name for n in p.nodes) == ["a", "b"]
    assert reasons(p.skipped) == {"old": "versions differ: torch 2.4.1 on Python 3.11.7"}


def test_manual_placement_names_the_machines_it_left_out():
    machines = [Candidate(1, "a", "h1", "online", cpu_count=4), Candidate(2, "b", "h2", "online", cpu_count=4)]
    s = spec()
    s["placement"]["machines"] = ["b"]
    assert reasons(plan(s, machines).skipped) == {"a": "not in the job's placement"}


def test_a_refused_plan_says_why_for_every_machine_and_a_waiting_one_says_it_in_its_reason():
    machines = [Candidate(1, "down", "h1", "offline", gpus=gpus(2)), Candidate(2, "up", "h2", "online", gpus=gpus(2))]
    with pytest.raises(PlanError) as refused:
        plan(spec(nodes=2, gpus_per_node=2, procs_per_node=2), machines)
    assert refused.value.kind == "capacity"
    assert reasons(refused.value.skipped) == {"down": "offline", "up": "fits, but the job needs 2 such machines"}
    busy = [Candidate(1, "taken", "h1", "busy", gpus=gpus(2), busy_gpus={0})]
    with pytest.raises(PlanError) as waiting:
        plan(spec(gpus_per_node=2, procs_per_node=2), busy)
    assert waiting.value.kind == "busy"
    assert waiting.value.reason == "waiting for 1 machines with free GPUs: 0 now (taken: 1 GPU free, 2 asked)"
    assert reasons(waiting.value.skipped) == {"taken": "1 GPU free, 2 asked"}


# --- through the API, on machines in the database -------------------------------------------------
JOB = {"name": "skip", "entrypoint": "examples/mlp_ddp.py", "resources": {"nodes": 1, "procs_per_node": 1}}


@pytest.mark.django_db
def test_the_plan_route_and_the_seeds_aliases_name_the_skipped_machines(api):
    for name in ("m-chosen", "m-drained", "m-suspect", "m-spare"):
        bring_online(name)
    machine_update(machine=Machine.objects.get(name="m-drained"), status="draining")
    machine_mark_suspect(machine_id=Machine.objects.get(name="m-suspect").pk)
    Machine.objects.create(name="m-pending", host="10.9.9.9")

    body = api.post("/api/jobs/plan", JOB, format="json").json()
    chosen = body["nodes"][0]["machine_name"]
    spare = ({"m-chosen", "m-spare"} - {chosen}).pop()
    want = {"m-drained": "draining", "m-suspect": "suspect", "m-pending": "pending",
            spare: "not needed: the job's 1 node went to machines before it"}
    assert reasons(body["skipped"]) == want
    for entry in body["skipped"]:
        assert set(entry) == {"machine_id", "machine_name", "reason"}
        assert entry["machine_id"] == Machine.objects.get(name=entry["machine_name"]).pk
    seed = {"plugin_name": "mlp_ddp", "resource_requirements": {"num_machines": 1}}
    for route in ("/api/network/distributed/plan", "/api/network/distributed_jobs/plan"):
        plan_body = api.post(route, seed, format="json").json()
        assert set(reasons(plan_body["execution_plan"]["skipped"])) == set(want)


@pytest.mark.django_db
def test_a_refused_submission_lists_the_skipped_machines_in_its_400(api):
    bring_online("only-one")
    Machine.objects.create(name="never-came", host="10.9.9.8")
    response = api.post("/api/jobs", {**JOB, "resources": {"nodes": 2, "procs_per_node": 1}}, format="json")
    assert response.status_code == 400
    body = response.json()
    assert "needs 2 online machines" in body["detail"]
    assert reasons(body["skipped"]) == {"never-came": "pending", "only-one": "fits, but the job needs 2 such machines"}

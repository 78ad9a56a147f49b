"""Placement policies by name: the Go scheduler's `simple` and `balanced` beside Torchyard's `pack` and
`spread`, a policy installed by another distribution's entry point (tests/plugins), and an unknown
name refused. The planner on snapshots, then `POST /api/jobs/plan` on machines in the database."""

from __future__ import annotations

import pytest
from factories import bring_online
from torchyard_server.jobs.placement import policies
from torchyard_server.jobs.placement.candidates import Candidate
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan


def gpus(*memory_mb: int) -> list[dict]:
    return [{"index": i, "name": "GPU", "memory_mb": mb} for i, mb in enumerate(memory_mb)]


def spec(policy: str, **resources) -> dict:
    base = {"resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0},
            "placement": {"policy": policy, "machines": [], "oversubscribe": False},
            "distributed": {"backend": "auto"}, "hyperparameters": {}, "scaling": {"mode": "none"}}
    base["resources"].update(resources)
    return base


def plan(s: dict, machines: list[Candidate]) -> Plan:
    return plan_job(JobSpec.from_json(s), machines, pick_port=lambda m: 29500)


def chosen(policy: str, machines: list[Candidate], **resources) -> tuple[str, list[int]]:
    node = plan(spec(policy, **resources), machines).nodes[0]
    return node.machine_name, node.gpus


# --- simple: least resource waste -----------------------------------------------------------------
def test_simple_leaves_the_fewest_free_gpus_big_enough_for_the_task():
    machines = [Candidate(1, "eight-a100", "h1", "online", gpus=gpus(*[81_920] * 8)),
                Candidate(2, "four-mixed", "h2", "online", gpus=gpus(16_384, 24_576, 24_576, 24_576)),
                Candidate(3, "two-rtx", "h3", "online", gpus=gpus(24_576, 24_576))]
    # 2 GPUs of 20 GB: the 16 GB GPU does not count, the 2-GPU machine is left with none free.
    assert chosen("simple", machines, gpus_per_node=2, procs_per_node=2, min_gpu_memory=20_000) == ("two-rtx", [0, 1])
    busy = [Candidate(2, "four-mixed", "h2", "online", gpus=gpus(16_384, 24_576, 24_576, 24_576), busy_gpus={1}),
            machines[0]]
    assert chosen("simple", busy, gpus_per_node=2, procs_per_node=2, min_gpu_memory=20_000) == ("four-mixed", [2, 3])


def test_simple_wastes_the_least_gpu_memory_where_pack_sees_only_gpus():
    machines = [Candidate(1, "a-two-80gb", "h1", "online", gpus=gpus(81_920, 81_920)),
                Candidate(2, "b-two-24gb", "h2", "online", gpus=gpus(24_576, 24_576))]
    # Both are left with no free GPU: pack takes the first by name, simple the one whose GPUs are
    # closest to the 20 GB asked.
    asked = {"gpus_per_node": 2, "procs_per_node": 2, "min_gpu_memory": 20_000}
    assert chosen("pack", machines, **asked)[0] == "a-two-80gb"
    assert chosen("simple", machines, **asked)[0] == "b-two-24gb"
    # On one machine, the smallest GPUs that are big enough; pack takes the lowest indices.
    mixed = [Candidate(1, "mixed", "h1", "online", gpus=gpus(49_152, 24_576, 12_288, 24_576))]
    assert chosen("simple", mixed, gpus_per_node=1, min_gpu_memory=20_000) == ("mixed", [1])
    assert chosen("pack", mixed, gpus_per_node=1, min_gpu_memory=20_000) == ("mixed", [0])
    assert chosen("simple", mixed, gpus_per_node=1, min_gpu_memory=40_000) == ("mixed", [0])


def test_simple_keeps_gpu_machines_for_gpu_jobs():
    machines = [Candidate(1, "a-gpu", "h1", "online", cpu_count=4, gpus=gpus(24_576)),
                Candidate(2, "b-cpu", "h2", "online", cpu_count=16)]
    assert chosen("simple", machines)[0] == "b-cpu"
    # pack counts the cores a CPU job leaves: the 4-core machine is the tighter fit.
    assert chosen("pack", machines)[0] == "a-gpu"


# --- balanced: fewest active tasks, most free GPUs -------------------------------------------------
def test_balanced_takes_the_fewest_active_tasks_and_the_most_free_gpus():
    idle_one = Candidate(1, "a-one-gpu", "h1", "online", gpus=gpus(24_576))
    idle_eight = Candidate(2, "b-eight-gpus", "h2", "online", gpus=gpus(*[24_576] * 8))
    busy_eight = Candidate(3, "c-eight-busy", "h3", "online", gpus=gpus(*[24_576] * 8), busy_gpus={0}, live_nodes=1)
    # Idle machines score alike, (0 - free) / GPUs = -1: the most free GPUs wins. spread and pack
    # take the 1-GPU machine (first by name; the tightest fit).
    machines = [idle_one, idle_eight, busy_eight]
    assert chosen("balanced", machines, gpus_per_node=1) == ("b-eight-gpus", [0])
    assert chosen("spread", machines, gpus_per_node=1)[0] == "a-one-gpu"
    assert chosen("pack", machines, gpus_per_node=1)[0] == "a-one-gpu"
    # A machine with a task scores (1 - 7) / 8 = -0.75: an idle machine goes first, however small.
    assert chosen("balanced", [busy_eight, idle_one], gpus_per_node=1)[0] == "a-one-gpu"


def test_balanced_weighs_free_gpus_against_tasks_where_spread_counts_only_tasks():
    # Two tasks on an 8-GPU machine with 6 free: (2 - 6) / 8 = -0.5; one task on a 2-GPU machine with
    # 1 free: (1 - 1) / 2 = 0. spread takes the one with fewer nodes.
    roomy = Candidate(1, "roomy", "h1", "online", gpus=gpus(*[24_576] * 8), busy_gpus={0, 1}, live_nodes=2)
    small = Candidate(2, "small", "h2", "online", gpus=gpus(24_576, 24_576), busy_gpus={0}, live_nodes=1)
    assert chosen("balanced", [small, roomy], gpus_per_node=1) == ("roomy", [2])
    assert chosen("spread", [small, roomy], gpus_per_node=1)[0] == "small"
    # Only GPUs of min_gpu_memory count as free: roomy's are too small for 40 GB.
    big = Candidate(3, "big", "h3", "online", gpus=gpus(81_920, 81_920), busy_gpus={0}, live_nodes=1)
    assert chosen("balanced", [roomy, big], gpus_per_node=1, min_gpu_memory=40_000)[0] == "big"


def test_balanced_counts_cores_as_slots_on_machines_without_gpus():
    machines = [Candidate(1, "a-loaded", "h1", "online", cpu_count=8, live_nodes=1, busy_procs=2),
                Candidate(2, "b-idle-small", "h2", "online", cpu_count=2),
                Candidate(3, "c-idle-large", "h3", "online", cpu_count=16)]
    assert chosen("balanced", machines)[0] == "c-idle-large"


# --- installed policies -------------------------------------------------------------------------------
def test_a_policy_installed_by_an_entry_point_is_found_by_its_name():
    names = policies.policy_names()
    assert names[:4] == ["pack", "spread", "simple", "balanced"]
    assert "reverse-name" in names  # tests/plugins, installed by `make install`
    machines = [Candidate(1, "a", "h1", "online", gpus=gpus(24_576, 24_576)),
                Candidate(2, "b", "h2", "online", gpus=gpus(24_576, 24_576)),
                Candidate(3, "c", "h3", "online", gpus=gpus(24_576, 24_576), labels={"avoid": "yes"})]
    p = plan(spec("reverse-name", gpus_per_node=1), machines)
    assert [(n.machine_name, n.gpus) for n in p.nodes] == [("b", [1])]
    assert {s["machine_name"]: s["reason"] for s in p.skipped}["c"] == "left out by placement policy reverse-name"


def test_a_policy_that_fails_is_replaced_by_the_default_and_the_plan_says_so():
    machines = [Candidate(1, "big", "h1", "online", gpus=gpus(24_576, 24_576, 24_576)),
                Candidate(2, "small", "h2", "online", gpus=gpus(24_576))]
    p = plan(spec("always-fails", gpus_per_node=1), machines)
    assert p.nodes[0].machine_name == "small"  # pack's choice
    assert p.warnings == ["placement policy always-fails failed (RuntimeError): placed by pack"]
    # A job queued with a policy that is no longer installed is placed by the default, not never.
    p = plan(spec("uninstalled", gpus_per_node=1), machines)
    assert p.nodes[0].machine_name == "small"
    assert p.warnings == ["placement policy uninstalled is not installed on this server: placed by pack"]


# --- through the API ------------------------------------------------------------------------------
def job(policy: str) -> dict:
    return {"name": "p", "entrypoint": "examples/mlp_ddp.py", "placement": {"policy": policy},
            "resources": {"nodes": 1, "procs_per_node": 2, "gpus_per_node": 2, "min_gpu_memory": 20_000}}


@pytest.mark.django_db
def test_the_plan_route_places_by_each_policy_name_and_refuses_an_unknown_one(api):
    bring_online("a-two-80gb", gpus=gpus(81_920, 81_920))
    bring_online("b-two-24gb", gpus=gpus(24_576, 24_576))
    bring_online("c-eight-24gb", gpus=gpus(*[24_576] * 8))
    bring_online("d-small-gpus", gpus=gpus(*[16_384] * 8))
    picks = {}
    for policy in ("pack", "spread", "simple", "balanced", "reverse-name"):
        answer = api.post("/api/jobs/plan", job(policy), format="json")
        assert answer.status_code == 200, answer.content
        picks[policy] = answer.json()["nodes"][0]["machine_name"]
    assert picks == {"pack": "a-two-80gb", "spread": "a-two-80gb", "simple": "b-two-24gb",
                     "balanced": "c-eight-24gb", "reverse-name": "c-eight-24gb"}

    refused = api.post("/api/jobs", job("fastest"), format="json")
    assert refused.status_code == 400
    message = refused.json()["placement"]["policy"][0]
    assert message.startswith("unknown placement policy 'fastest'; choose one of: pack, spread, simple, balanced")
    assert "reverse-name" in message
    stored = api.post("/api/jobs", job("balanced"), format="json")
    assert stored.status_code == 201 and stored.json()["spec"]["placement"]["policy"] == "balanced"


@pytest.mark.django_db
def test_the_policies_route_lists_the_built_in_and_the_installed_ones(api, anonymous):
    listed = {p["name"]: p for p in api.get("/api/placement-policies").json()}
    assert list(listed)[:4] == ["pack", "spread", "simple", "balanced"]
    assert listed["balanced"]["built_in"] and listed["balanced"]["description"].startswith("the Go scheduler's balanced")
    assert listed["reverse-name"] == {"name": "reverse-name", "built_in": False,
                                      "description": "the tests' policy: machines by name, last first, none labelled avoid"}
    assert anonymous.get("/api/placement-policies").status_code == 401


@pytest.mark.django_db
def test_a_job_that_names_no_policy_gets_the_servers_default(api, settings):
    bring_online("a-two-80gb", gpus=gpus(81_920, 81_920))
    bring_online("c-eight-24gb", gpus=gpus(*[24_576] * 8))
    unnamed = job("pack")
    del unnamed["placement"]
    assert api.post("/api/jobs/plan", unnamed, format="json").json()["nodes"][0]["machine_name"] == "a-two-80gb"
    settings.PLACEMENT_POLICY = "balanced"  # `torchyard-server run --policy balanced`, as the Go scheduler's server
    assert api.post("/api/jobs/plan", unnamed, format="json").json()["nodes"][0]["machine_name"] == "c-eight-24gb"
    assert api.post("/api/jobs", unnamed, format="json").json()["spec"]["placement"]["policy"] == "balanced"


def test_a_default_policy_the_server_lacks_stops_it_at_start(settings):
    assert policies.default_policy_check() == []
    settings.PLACEMENT_POLICY = "fastest"
    [error] = policies.default_policy_check()
    assert error.msg.startswith("TORCHYARD_PLACEMENT_POLICY='fastest' is not a placement policy of this server; "
                                "choose one of: pack, spread, simple, balanced")

"""How TransformerLab's bodies choose machines, and nothing else of theirs accepted and ignored:
machine_selection auto (Torchyard's spread policy, the order suggest_machines answers in) or manual
(selected_machines by name, id or host, rank 0's first); a placement asked any other way, a key the
body does not declare, or a selection the body contradicts, refused with a sentence saying what to
use instead."""

from __future__ import annotations

import pytest
from factories import bring_online
from torchyard_server.jobs.models import Job
from torchyard_server.templates.models import JobTemplate

pytestmark = pytest.mark.django_db

PLAN = {"plugin_name": "mlp_ddp", "config": {"batch_size": 64, "lr": 0.001}}
PLACEMENT = ("TransformerLab's body chooses machines with machine_selection: auto (Torchyard's spread policy, the "
             "least loaded machines first) or manual (the machines of selected_machines, rank 0 on the first). For "
             "another placement policy (pack, simple, balanced), submit a JobSpec to POST /api/jobs with "
             "placement.policy.")
ROUTES = ["/api/network/distributed/plan", "/api/network/distributed/dispatch", "/api/tasks"]


def post(api, url, body):
    return api.post(url, body, format="json")


@pytest.mark.parametrize("url", ROUTES)
def test_selected_machines_with_automatic_selection_are_refused_not_ignored(api, two_machines, url):
    refused = post(api, url, {**PLAN, "selected_machines": ["gpu-b"]})
    assert refused.status_code == 400, refused.content
    assert refused.json() == {"selected_machines": [
        "machine_selection is auto: Torchyard chooses the machines (the least loaded first). Set machine_selection "
        "to manual to run on these, or leave selected_machines out."]}
    assert not Job.objects.exists() and not JobTemplate.objects.exists()


@pytest.mark.parametrize("url", ROUTES)
@pytest.mark.parametrize("key", ["placement", "policy", "placement_policy"])
def test_a_placement_policy_asked_in_a_body_is_refused_saying_what_to_use(api, two_machines, url, key):
    value = {"policy": "pack"} if key == "placement" else "pack"
    refused = post(api, url, {**PLAN, key: value})
    assert refused.status_code == 400, refused.content
    assert refused.json() == {key: [PLACEMENT]}


def test_other_keys_the_body_does_not_take_are_refused_at_their_path(api, two_machines):
    refused = post(api, "/api/network/distributed/dispatch", {
        **PLAN, "resource_requirements": {"num_machine": 2}, "epochs": 3, "master_port": 29500, "world_size": 2})
    assert refused.status_code == 400, refused.content
    body = refused.json()
    assert body["resource_requirements"] == {"num_machine": ["unknown field (did you mean num_machines?)."]}
    assert body["epochs"] == ["unknown field."]
    assert body["master_port"] == [
        "Torchyard picks a whole job's master itself: rank 0's machine and a free port on it, which the job's status "
        "answers; leave master_addr and master_port out (machine_selection manual, with a machine first in "
        "selected_machines, makes that machine rank 0's)."]
    assert body["world_size"] == [
        "a whole job's size is resource_requirements.num_machines (machines) and procs_per_machine (processes on "
        "each); world_size belongs to a per-rank dispatch, with rank and target_machine."]
    named = post(api, "/api/network/distributed/plan", {**PLAN, "job_id": "dist_job_123"})
    assert named.status_code == 400 and named.json() == {"job_id": [
        "this route names the job itself (its answer's job_id or id); to submit a job under your own job_id, send "
        "this body with it to POST /api/network/distributed/dispatch."]}
    assert not Job.objects.exists()


def test_automatic_selection_places_by_the_spread_policy(api, two_machines):
    submitted = post(api, "/api/network/distributed/dispatch", {**PLAN, "resource_requirements": {"num_machines": 2}})
    assert submitted.status_code == 201, submitted.content
    placement = Job.objects.get().spec["placement"]
    assert (placement["policy"], placement["machines"]) == ("spread", [])


def test_manual_selection_takes_names_ids_and_hosts_in_rank_order(api, two_machines):
    a, b = two_machines
    body = {**PLAN, "machine_selection": "manual", "selected_machines": [b.host, str(a.pk)]}
    plan = post(api, "/api/network/distributed/plan", body)
    assert plan.status_code == 200, plan.content
    # num_machines left out: as many as selected; rank 0 (the master) on the first.
    assert plan.json()["spec"]["resources"]["nodes"] == 2
    assert plan.json()["spec"]["placement"]["machines"] == [b.name, a.name]
    assert [n["machine_name"] for n in plan.json()["execution_plan"]["nodes"]] == [b.name, a.name]
    assert plan.json()["execution_plan"]["master_addr"] == b.host
    submitted = post(api, "/api/network/distributed/dispatch", body)
    assert submitted.status_code == 201, submitted.content
    assert Job.objects.get().spec["placement"]["machines"] == [b.name, a.name]


def test_a_manual_selection_that_contradicts_itself_is_refused(api, two_machines):
    a, b = two_machines
    manual = {**PLAN, "machine_selection": "manual"}
    cases = [
        ({**manual, "selected_machines": []}, {"selected_machines": [
            "machine_selection manual runs on the machines listed here: name them (rank 0's first), or set "
            "machine_selection to auto."]}),
        ({**manual, "selected_machines": [a.name, a.name]}, {"selected_machines": [
            "gpu-a selected more than once: a machine takes one rank of a job (procs_per_machine runs more "
            "processes on it)."]}),
        ({**manual, "selected_machines": [a.name, a.host]}, {"selected_machines": [
            "gpu-a selected more than once (by name, id or host): a machine takes one rank of a job."]}),
        ({**manual, "selected_machines": [a.name, b.name], "resource_requirements": {"num_machines": 1}},
         {"resource_requirements": {"num_machines": [
             "says 1, but selected_machines names 2 machines: select as many, or leave num_machines out (it is "
             "then the number selected)."]}}),
        ({**manual, "selected_machines": [a.name, "192.168.1.101"]}, {"selected_machines": [
            "no machine has the name, id or host '192.168.1.101'."]}),
    ]
    for url in ROUTES[:2]:
        for body, errors in cases:
            refused = post(api, url, body)
            assert refused.status_code == 400, (url, body, refused.content)
            assert refused.json() == errors, (url, body)
    assert not Job.objects.exists() and not JobTemplate.objects.exists()


def test_a_host_that_several_machines_share_must_be_named(api, two_machines):
    a, _ = two_machines
    twin, _ = bring_online("gpu-twin")
    type(twin).objects.filter(pk=twin.pk).update(host=a.host)
    refused = post(api, "/api/network/distributed/plan",
                   {**PLAN, "machine_selection": "manual", "selected_machines": [a.host]})
    assert refused.status_code == 400
    assert refused.json() == {"selected_machines": [
        f"several machines answer to {a.host} (gpu-a, gpu-twin): give the machine's name."]}


def test_a_task_may_name_a_machine_that_joins_later(api):
    saved = post(api, "/api/tasks", {**PLAN, "machine_selection": "manual", "selected_machines": ["gpu-later"]})
    assert saved.status_code == 201, saved.content
    assert saved.json()["selected_machines"] == ["gpu-later"] and saved.json()["resource_requirements"]["num_machines"] == 1


# --- suggest_machines ---------------------------------------------------------------------------------
def test_suggestions_come_in_the_order_of_the_policy_asked_spread_by_default(api, two_machines):
    big, _ = bring_online("gpu-big", gpus=[{"index": i, "name": "A100", "memory_mb": 81920} for i in range(2)])
    small, _ = bring_online("gpu-small", gpus=[{"index": 0, "name": "T4", "memory_mb": 16384}])
    url = "/api/tasks/distributed/suggest_machines"
    body = api.get(f"{url}?num_machines=1&gpus_per_machine=1").json()
    assert set(body["suggested"]) <= {big.pk, small.pk} and len(body["suggested"]) == 1
    assert {m["name"] for m in body["machines"]} == {"gpu-big", "gpu-small"}
    # pack: the machine a node fits most tightly first (one GPU left free on gpu-small: none).
    packed = api.get(f"{url}?num_machines=1&gpus_per_machine=1&policy=pack").json()
    assert packed["suggested"] == [small.pk]
    # GPUs of 40 GB or more: gpu-small's T4 does not count.
    roomy = api.get(f"{url}?num_machines=2&gpus_per_machine=1&min_gpu_memory=40960").json()
    assert (roomy["suggested"], roomy["enough"]) == ([big.pk], False)


def test_a_suggestion_query_it_cannot_read_is_refused_by_name(api, two_machines):
    url = "/api/tasks/distributed/suggest_machines"
    bad = api.get(f"{url}?num_machines=x&policy=nearest&gpu_per_machine=1")
    assert bad.status_code == 400
    body = bad.json()
    assert body["num_machines"] == ["A valid integer is required."]
    assert body["policy"][0].startswith("unknown placement policy 'nearest'; choose one of: ")
    assert body["gpu_per_machine"] == ["unknown field (did you mean gpus_per_machine?)."]
    assert api.get(f"{url}?format=json").status_code == 200

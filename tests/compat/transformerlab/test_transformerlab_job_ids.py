"""TransformerLab's job ids on every route spelling that takes one (distributed/status/{id},
distributed/stop/{id}, distributed_jobs/{id}/status): Torchyard's job ids (digits), a plan's job_id
(plan-12), followed from the plan to the job it became, and the name a per-rank dispatch gave its job
(dist_job_123); unknown and malformed ids refused with a sentence. And the dispatch bodies' fields
that Torchyard does not take as given (master_addr, master_port, a plan's fields) refused when
they say otherwise, never ignored."""

from __future__ import annotations

import pytest
from clients import signed_in
from django.conf import settings as django_settings
from torchyard_server.compat.transformerlab.models import RankDispatch
from torchyard_server.jobs.control.queue_pass import job_schedule
from torchyard_server.jobs.models import Job
from torchyard_server.machines.models import Machine
from torchyard_server.templates.models import JobTemplate

from .status_routes import status_urls, statuses

pytestmark = pytest.mark.django_db

PLAN = {"plugin_name": "mlp_ddp", "config": {"batch_size": 64, "lr": 0.001},
        "resource_requirements": {"num_machines": 2, "procs_per_machine": 2}}


def planned(api, body=PLAN) -> dict:
    response = api.post("/api/network/distributed/plan", body, format="json")
    assert response.status_code == 200, response.content
    return response.json()


def rank_body(rank: int, machine: Machine, **changes) -> dict:
    return {"job_id": "dist_job_123", "target_machine": machine.name, "rank": rank, "world_size": 2,
            "plugin_name": "mlp_ddp", "config": {"lr": 0.001}, **changes}


def dispatch(api, body):
    return api.post("/api/network/distributed_jobs/dispatch", body, format="json")


# --- a plan's job_id ------------------------------------------------------------------------------
def test_a_plan_is_polled_by_its_job_id_as_planned_and_stopping_it_leaves_it_be(api, two_machines):
    plan = planned(api)
    job_id = plan["job_id"]
    assert job_id == f"plan-{plan['task_id']}"
    body = statuses(api, job_id)
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (None, job_id, "planned")
    assert (body["world_size"], body["attempt"], body["master_addr"], body["master_port"]) == (4, 0, "", None)
    assert body["nodes"] == [] and body["waiting_for_ranks"] == []
    assert body["status_reason"] == (
        f"planned, not queued: queue it with POST /api/tasks/{plan['task_id']}/queue_distributed or "
        f'POST /api/network/distributed/dispatch {{"job_id": "{job_id}"}}')

    stopped = api.post(f"/api/network/distributed/stop/{job_id}")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["job_id"], stopped.json()["status"]) == (None, "planned")
    assert stopped.json()["status_reason"] == (
        f"nothing to stop: {job_id} was never queued. The plan stays, as task {plan['task_id']} "
        f"(DELETE /api/tasks/{plan['task_id']} removes it).")
    assert JobTemplate.objects.filter(pk=plan["task_id"]).exists() and not Job.objects.exists()
    # The same plan again, never queued, is the same plan.
    assert planned(api)["job_id"] == job_id


@pytest.mark.parametrize("queue", ["tasks", "tasks_plan", "dispatch"])
def test_once_queued_a_plans_job_id_follows_the_job_it_became_and_stops_it(api, two_machines, queue):
    plan = planned(api)
    job_id = plan["job_id"]
    if queue == "tasks":  # as the document writes it, with an API token
        queued = api.get(f"/api/tasks/{plan['task_id']}/queue_distributed")
    elif queue == "tasks_plan":  # the plan's job_id echoed into the tasks route
        queued = api.post(f"/api/tasks/{job_id}/queue_distributed")
    else:
        queued = api.post("/api/network/distributed/dispatch", {"job_id": job_id}, format="json")
    assert queued.status_code == 201, queued.content
    job = Job.objects.get()
    assert queued.json()["job_id"] == job.pk

    body = statuses(api, job_id)
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (job.pk, job_id, "queued")
    # Torchyard's own id answers the same job (its digits are never read as a plan's).
    assert statuses(api, job.pk)["job_id"] == job.pk

    stopped = api.post(f"/api/network/distributed/stop/{job_id}")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["job_id"], stopped.json()["seed_job_id"], stopped.json()["status"]) == (job.pk, job_id, "stopped")
    job.refresh_from_db()
    assert job.status == "stopped" and statuses(api, job_id)["status"] == "stopped"
    # Planning the same job again is a new plan: the old one's job_id keeps following its job.
    again = planned(api)["job_id"]
    assert again != job_id and statuses(api, again)["status"] == "planned"


def test_the_newest_job_of_a_plan_is_the_one_its_job_id_follows(api, two_machines):
    plan = planned(api)
    first = api.post(f"/api/tasks/{plan['task_id']}/queue_distributed").json()["job_id"]
    second = api.post(f"/api/tasks/{plan['task_id']}/queue_distributed").json()["job_id"]
    assert first != second and statuses(api, plan["job_id"])["job_id"] == second


def test_a_plan_dispatched_rank_by_rank_is_followed_from_its_ranks_to_its_job(api, two_machines):
    a, b = two_machines
    plan = planned(api)
    job_id = plan["job_id"]
    waiting = dispatch(api, {"job_id": job_id, "target_machine": a.name, "rank": 0, "world_size": 2})
    assert waiting.status_code == 202, waiting.content
    body = statuses(api, job_id)
    assert (body["job_id"], body["seed_job_id"], body["status"], body["waiting_for_ranks"]) == (None, job_id, "dispatching", [1])
    done = dispatch(api, {"job_id": job_id, "target_machine": b.name, "rank": 1, "world_size": 2})
    assert done.status_code == 201, done.content
    job = Job.objects.get()
    assert job.spec["placement"]["machines"] == [a.name, b.name] and job.spec["hyperparameters"]["lr"] == 0.001
    body = statuses(api, job_id)
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (job.pk, job_id, "queued")
    assert api.post(f"/api/network/distributed/stop/{job_id}").json()["status"] == "stopped"


def test_stopping_a_plans_ranks_before_they_all_came_drops_them(api, two_machines):
    a, b = two_machines
    job_id = planned(api)["job_id"]
    dispatch(api, {"job_id": job_id, "target_machine": a.name, "rank": 0, "world_size": 2})
    stopped = api.post(f"/api/network/distributed/stop/{job_id}")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["job_id"], stopped.json()["status"]) == (None, "stopped")
    assert stopped.json()["status_reason"] == "stopped before every rank came: rank(s) 0 dropped, nothing was launched"
    assert not RankDispatch.objects.exists()
    # Rank 1 alone now starts nothing; the plan is planned again.
    assert dispatch(api, {"job_id": job_id, "target_machine": b.name, "rank": 1, "world_size": 2}).status_code == 202
    assert not Job.objects.exists()


def test_only_who_may_stop_the_plans_job_stops_it(api, two_machines, teammate):
    plan = planned(api)
    bob = signed_in(teammate)
    assert bob.get(status_urls(plan["job_id"])[0]).json()["status"] == "planned"  # the project sees it
    assert bob.post(f"/api/network/distributed/stop/{plan['job_id']}").status_code == 403
    api.post(f"/api/tasks/{plan['task_id']}/queue_distributed")
    refused = bob.post(f"/api/network/distributed/stop/{plan['job_id']}")
    assert refused.status_code == 403 and "owner" in refused.json()["detail"]
    assert Job.objects.get().status == "queued"


# --- a per-rank dispatch's job_id ------------------------------------------------------------------
def test_a_dispatchs_job_id_is_polled_and_stopped_on_every_spelling(api, two_machines):
    a, b = two_machines
    assert dispatch(api, rank_body(0, a)).status_code == 202
    body = statuses(api, "dist_job_123")
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (None, "dist_job_123", "dispatching")
    assert dispatch(api, rank_body(1, b)).status_code == 201
    job = Job.objects.get()
    body = statuses(api, "dist_job_123")
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (job.pk, "dist_job_123", "queued")
    stopped = api.post("/api/network/distributed/stop/dist_job_123")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["job_id"], stopped.json()["status"]) == (job.pk, "stopped")
    job.refresh_from_db()
    assert job.status == "stopped"


def test_stopping_a_dispatch_before_every_rank_came_drops_its_ranks(api, two_machines):
    a, _ = two_machines
    dispatch(api, rank_body(1, a))
    stopped = api.post("/api/network/distributed/stop/dist_job_123")
    assert stopped.status_code == 200
    assert (stopped.json()["status"], stopped.json()["waiting_for_ranks"]) == ("stopped", [])
    assert not RankDispatch.objects.exists()
    for url in [*status_urls("dist_job_123"), "/api/network/distributed/stop/dist_job_123"]:
        gone = api.post(url) if "stop" in url else api.get(url)
        assert gone.status_code == 404, url


def test_a_dispatch_may_not_name_its_job_with_digits(api, two_machines):
    a, _ = two_machines
    refused = dispatch(api, rank_body(0, a, job_id="123"))
    assert refused.status_code == 400
    assert refused.json()["job_id"] == [
        "123 is a Torchyard job id (digits name a submitted job on every route): name your job with letters "
        "(dist_job_123), or give a plan's job_id (plan-12)."]


# --- unknown and malformed ids ---------------------------------------------------------------------
@pytest.mark.parametrize(("job_id", "code", "says"), [
    ("999999", 404, "no job 999999: there is no Torchyard job 999999 that you may see."),
    ("99999999999999999999999", 404, "no job 99999999999999999999999: there is no Torchyard job"),
    ("plan-999999", 404, "no plan plan-999999: there is no task 999999 that you may see."),
    ("plan-abc", 404, "no job 'plan-abc': neither a Torchyard job id (digits), a plan's job_id (plan-12) nor the "
                      "job_id you gave a job of yours."),
    ("dist_job_none", 404, "no job 'dist_job_none'"),
    ("-1", 404, "no job '-1'"),
    ("x" * 101, 400, "is 101 characters long; a job_id has at most 100."),
])
def test_unknown_and_malformed_ids_are_refused_with_a_sentence_on_every_spelling(api, two_machines, job_id, code, says):
    for url in [*status_urls(job_id), f"/api/network/distributed/stop/{job_id}"]:
        response = api.post(url) if "/stop/" in url else api.get(url)
        assert response.status_code == code, (url, response.content)
        body = response.json()
        text = body["detail"] if code == 404 else body["job_id"][0]
        assert says in text, (url, body)


def test_another_users_plan_is_a_404(api, two_machines, outsider):
    plan = planned(api)
    stranger = signed_in(outsider)
    for url in [*status_urls(plan["job_id"]), f"/api/network/distributed/stop/{plan['job_id']}"]:
        response = stranger.post(url) if "/stop/" in url else stranger.get(url)
        assert response.status_code == 404, url


def test_a_whole_job_dispatch_takes_a_plans_job_id_or_one_of_its_own_never_digits(api, two_machines):
    # Digits are Torchyard's; an id of one's own needs the job's fields (a whole job under that id).
    for body, why in (({**PLAN, "job_id": "57"}, "57 is a Torchyard job id"),
                      ({"job_id": "dist_job_9"}, "'dist_job_9' is not the job_id of a plan")):
        refused = api.post("/api/network/distributed/dispatch", body, format="json")
        assert refused.status_code == 400, refused.content
        assert refused.json()["job_id"][0].startswith(why)
        assert refused.json()["job_id"][0].endswith(
            "Give plugin_name and the job's other fields to submit the job under a job_id of your own (letters: "
            "dist_job_123), leave job_id out for Torchyard's id alone, or add rank and target_machine to dispatch "
            "it rank by rank.")
    assert not Job.objects.exists()


# --- master_addr and master_port ------------------------------------------------------------------
MASTER = ("Torchyard picks the master itself: node 0's machine (the one rank 0 targets) and a free port on it, "
          "which the job's status answers; leave master_addr and master_port out of the dispatch.")


def test_a_master_addr_naming_rank_0s_machine_is_accepted_and_any_other_refused(api, two_machines):
    a, b = two_machines
    assert dispatch(api, rank_body(0, a, master_addr=a.host)).status_code == 202
    wrong = dispatch(api, rank_body(1, b, master_addr=b.host))
    assert wrong.status_code == 400
    assert wrong.json()["master_addr"] == [f"{b.host} is not rank 0's machine {a.name} ({a.host}). {MASTER}"]
    # By the machine's name too; and the job, once every rank came, has rank 0's machine as its master.
    assert dispatch(api, rank_body(1, b, master_addr=a.name)).status_code == 201
    job = Job.objects.get()
    job_schedule(job_id=job.pk)
    job.refresh_from_db()
    assert job.master_addr == a.host


def test_a_master_addr_named_before_rank_0_came_must_be_rank_0s_machine(api, two_machines):
    a, b = two_machines
    nowhere = dispatch(api, rank_body(1, a, master_addr="192.168.1.100"))
    assert nowhere.status_code == 400
    assert nowhere.json()["master_addr"] == [f"no machine has the name or host '192.168.1.100'. {MASTER}"]
    assert dispatch(api, rank_body(1, a, master_addr=a.host)).status_code == 202
    # Rank 0 on another machine than rank 1 named: refused, whichever rank came first.
    refused = dispatch(api, rank_body(0, b))
    assert refused.status_code == 400
    assert refused.json()["master_addr"] == [
        f"rank(s) 1 of dist_job_123 named master_addr {a.host}, which is not rank 0's machine {b.name} ({b.host}): "
        f"send rank 0 to that machine, or send those ranks again without master_addr. {MASTER}"]
    assert not Job.objects.exists() and list(RankDispatch.objects.values_list("rank", flat=True)) == [1]
    # Rank 1 again without it: rank 0 on b completes the job.
    assert dispatch(api, rank_body(1, a)).status_code == 202
    assert dispatch(api, rank_body(0, b)).status_code == 201


def test_a_master_port_is_refused_until_it_is_the_one_torchyard_picked(api, two_machines):
    a, b = two_machines
    early = dispatch(api, rank_body(0, a, master_port=29500))
    assert early.status_code == 400
    assert early.json()["master_port"] == [
        "Torchyard has not picked this job's master port yet (it does when it schedules the job), so 29500 "
        f"cannot be it. {MASTER}"]
    assert not RankDispatch.objects.exists()
    dispatch(api, rank_body(0, a))
    dispatch(api, rank_body(1, b))
    job = Job.objects.get()
    job_schedule(job_id=job.pk)
    job.refresh_from_db()
    picked = job.master_port
    assert statuses(api, "dist_job_123")["master_port"] == picked
    # A rank sent again with the port its status answered: the same answer.
    again = dispatch(api, rank_body(1, b, master_port=picked, master_addr=a.host))
    assert again.status_code == 200 and again.json()["job_id"] == job.pk
    other = picked + 1 if picked < 65535 else picked - 1
    wrong = dispatch(api, rank_body(1, b, master_port=other))
    assert wrong.status_code == 400
    assert wrong.json()["master_port"] == [f"this job's master port is {picked}, not {other}. {MASTER}"]


def test_a_master_port_outside_the_range_or_another_jobs_is_refused_saying_so(api, two_machines):
    a, b = two_machines
    low, high = django_settings.MASTER_PORT_RANGE
    outside = dispatch(api, rank_body(0, a, master_port=low - 1))
    assert outside.status_code == 400
    assert outside.json()["master_port"] == [
        f"{low - 1} is outside the job-port range {low}-{high} (TORCHYARD_MASTER_PORT_MIN and "
        f"TORCHYARD_MASTER_PORT_MAX). {MASTER}"]
    # Another job's master runs on gpu-a: its port is taken there, for rank 0 and for every rank once
    # rank 0's machine is known.
    other = api.post("/api/jobs", {"name": "other", "entrypoint": "examples/mlp_ddp.py",
                                   "placement": {"machines": [a.name]}}, format="json").json()["id"]
    job_schedule(job_id=other)
    taken = Job.objects.get(pk=other).master_port
    says = [f"{taken} is job {other}'s master port on {a.name}. {MASTER}"]
    assert dispatch(api, rank_body(0, a, master_port=taken)).json()["master_port"] == says
    assert dispatch(api, rank_body(0, a)).status_code == 202
    assert dispatch(api, rank_body(1, b, master_port=taken)).json()["master_port"] == says
    assert list(RankDispatch.objects.values_list("rank", flat=True)) == [0]


# --- the other fields of a dispatch body ------------------------------------------------------------
def test_a_rank_refuses_whole_job_fields_it_has_no_use_for(api, two_machines):
    a, _ = two_machines
    selection = dispatch(api, rank_body(0, a, machine_selection="manual", selected_machines=[a.name]))
    assert selection.status_code == 400
    for key in ("machine_selection", "selected_machines"):
        assert selection.json()[key] == ["a per-rank dispatch places each rank on its target_machine: leave "
                                         "machine_selection and selected_machines out."]
    machines = dispatch(api, rank_body(0, a, resource_requirements={"num_machines": 3}))
    assert machines.status_code == 400
    assert machines.json()["resource_requirements"] == {"num_machines": [
        "world_size says 2 machines: leave num_machines out, or send the same."]}
    placed = dispatch(api, rank_body(0, a, placement={"policy": "pack"}, gpus=1))
    assert placed.status_code == 400
    assert placed.json() == {
        "placement": ["a per-rank dispatch places each rank on its target_machine (rank 0's is the master): leave "
                      "placement out."],
        "gpus": ["unknown field."]}
    assert dispatch(api, rank_body(0, a, resource_requirements={"num_machines": 2})).status_code == 202


def test_a_plans_fields_repeated_in_a_dispatch_must_say_what_the_plan_says(api, two_machines):
    a, b = two_machines
    job_id = planned(api)["job_id"]
    rank = {"job_id": job_id, "target_machine": a.name, "rank": 0, "world_size": 2}
    changed = dispatch(api, {**rank, "plugin_name": "mlp_ddp", "config": {"lr": 1.0}, "world_size": 3,
                             "resource_requirements": {"procs_per_machine": 1}})
    assert changed.status_code == 400
    advice = "leave it out (the plan stands for it), or plan again to change it."
    assert changed.json()["config"] == [f"{job_id} says lr 0.001: {advice}"]
    assert changed.json()["resource_requirements"] == [f"{job_id} says procs_per_machine 2: {advice}"]
    assert changed.json()["world_size"] == [
        f"{job_id} plans 2 machine(s), not 3: send world_size 2, or plan again to change it."]
    assert "plugin_name" not in changed.json()  # it agrees
    # The same values repeated are the plan's own: accepted.
    same = dispatch(api, {**rank, "plugin_name": "mlp_ddp", "config": {"lr": 0.001}})
    assert same.status_code == 202, same.content

    whole = api.post("/api/network/distributed/dispatch",
                     {"job_id": job_id, "plugin_name": "other", "args": ["--x"], "project": "default"}, format="json")
    assert whole.status_code == 400
    assert whole.json()["plugin_name"] == [f"{job_id} says plugin_name 'mlp_ddp': {advice}"]
    assert whole.json()["args"] == [f"{job_id} says args []: {advice}"]
    assert not Job.objects.exists()
    ok = api.post("/api/network/distributed/dispatch", {"job_id": job_id, **PLAN}, format="json")
    assert ok.status_code == 201, ok.content
    assert ok.json()["seed_job_id"] == job_id


def test_a_plan_placed_by_hand_takes_each_rank_on_its_machine_only(api, two_machines):
    a, b = two_machines
    job_id = planned(api, {**PLAN, "machine_selection": "manual", "selected_machines": [b.name, a.name]})["job_id"]
    wrong = dispatch(api, {"job_id": job_id, "target_machine": a.name, "rank": 0, "world_size": 2})
    assert wrong.status_code == 400
    assert wrong.json()["target_machine"] == [
        f"{job_id} places rank 0 on {b.name}, not {a.name}: send it there, or plan again to change it."]
    assert dispatch(api, {"job_id": job_id, "target_machine": b.host, "rank": 0, "world_size": 2}).status_code == 202

"""TransformerLab's remote-job routes with a {job_id} (machines/{id}/job_status/{job_id},
machines/{id}/stop_job/{job_id}, local_job_status/{job_id}, local_job_output/{job_id},
local_job_file/{job_id}/{key}) take the job ids the status routes take (ids.py): Torchyard's
(digits), the job_id a job was named with (execute_job's, a whole job's, a per-rank dispatch's)
and a plan's; an unknown id is a 404 naming it and one over 100 characters a 400, never Django's
page. And execute_job's own job_id: a new name, a name in use, a plan's, digits."""

from __future__ import annotations

import hashlib

import pytest
from clients import downloaded, signed_in
from torchyard_server.artifacts.services import artifacts_record
from torchyard_server.compat.transformerlab.models import NamedJob, RankDispatch
from torchyard_server.jobs.control.queue_pass import job_schedule
from torchyard_server.jobs.models import Job

from .status_routes import STATUS_FIELDS, statuses

pytestmark = pytest.mark.django_db

SPEC = {"name": "remote", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "20"],
        "resources": {"nodes": 1, "procs_per_node": 2}, "hyperparameters": {"batch_size": 64}}
NAME = "remote-7"
OUTPUT = b"weights\n"

# Each route with a {job_id}: its method and its URL on machine `m` (the job's machine where it has one).
ROUTES = {
    "job_status": ("get", lambda m, job_id: f"/api/network/machines/{m}/job_status/{job_id}"),
    "stop_job": ("post", lambda m, job_id: f"/api/network/machines/{m}/stop_job/{job_id}"),
    "local_job_status": ("get", lambda m, job_id: f"/api/network/local_job_status/{job_id}"),
    "local_job_output": ("get", lambda m, job_id: f"/api/network/local_job_output/{job_id}"),
    "local_job_file": ("get", lambda m, job_id: f"/api/network/local_job_file/{job_id}/model.txt"),
}


def ask(api, route: str, machine_id: int, job_id):
    method, url = ROUTES[route]
    return getattr(api, method)(url(machine_id, job_id))


@pytest.fixture
def named_job(api, two_machines, settings, tmp_path):
    """A job named remote-7 by execute_job on gpu-a, scheduled (its node there), with one output file."""
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    a, _ = two_machines
    ran = api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": NAME, "target_machine": a.name},
                   format="json")
    assert ran.status_code == 201, ran.content
    job_schedule(job_id=ran.json()["job_id"])
    job = Job.objects.get(pk=ran.json()["job_id"])
    folder = tmp_path / "store" / f"job-{job.pk}" / "artifacts" / "attempt-0" / "node-0"
    folder.mkdir(parents=True)
    (folder / "model.txt").write_bytes(OUTPUT)
    artifacts_record(event={"job": job.pk, "attempt": 0, "node_rank": 0, "files": [
        {"path": "model.txt", "size": len(OUTPUT), "sha256": hashlib.sha256(OUTPUT).hexdigest(),
         "uri": (folder / "model.txt").as_uri()}]})
    assert NamedJob.objects.get().job_id == job.pk and job.nodes.get().machine_id == a.pk
    return job


# --- Torchyard's id and the job's own name: the same job ------------------------------------------
@pytest.mark.parametrize("by", ["number", "name"])
def test_the_machine_job_status_takes_the_number_and_the_name(api, two_machines, named_job, by):
    a, _ = two_machines
    job_id, seed_job_id = (named_job.pk, None) if by == "number" else (NAME, NAME)
    response = ask(api, "job_status", a.pk, job_id)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == STATUS_FIELDS
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (named_job.pk, seed_job_id, "dispatching")
    assert [n["machine_id"] for n in body["nodes"]] == [a.pk]


@pytest.mark.parametrize("by", ["number", "name"])
def test_the_machine_stop_job_takes_the_number_and_the_name(api, two_machines, named_job, by):
    a, _ = two_machines
    job_id, seed_job_id = (named_job.pk, None) if by == "number" else (NAME, NAME)
    response = ask(api, "stop_job", a.pk, job_id)
    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == STATUS_FIELDS
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (named_job.pk, seed_job_id, "stopping")
    assert body["status_reason"] == "stopped by alice" and [n["machine_id"] for n in body["nodes"]] == [a.pk]
    named_job.refresh_from_db()
    assert named_job.status == "stopping"


@pytest.mark.parametrize("by", ["number", "name"])
def test_local_job_status_takes_the_number_and_the_name_as_the_status_route(api, named_job, by):
    job_id = named_job.pk if by == "number" else NAME
    response = ask(api, "local_job_status", 0, job_id)
    assert response.status_code == 200, response.content
    assert response.json() == statuses(api, job_id)
    assert (response.json()["job_id"], response.json()["seed_job_id"]) == (
        named_job.pk, None if by == "number" else NAME)


@pytest.mark.parametrize("by", ["number", "name"])
def test_local_job_output_and_file_take_the_number_and_the_name(api, named_job, by):
    job_id = named_job.pk if by == "number" else NAME
    output = ask(api, "local_job_output", 0, job_id)
    assert output.status_code == 200, output.content
    body = output.json()
    assert (body["job_id"], body["status"], [f["path"] for f in body["files"]]) == (
        named_job.pk, "dispatching", ["model.txt"])
    assert downloaded(ask(api, "local_job_file", 0, job_id)) == OUTPUT
    missing = api.get(f"/api/network/local_job_file/{job_id}/nothing.txt")
    label = f"{named_job.pk}" if by == "number" else f"{named_job.pk} ({NAME})"
    assert missing.status_code == 404 and missing.json()["detail"] == f"job {label} has no output file 'nothing.txt'."


# --- unknown and malformed ids ---------------------------------------------------------------------
@pytest.mark.parametrize("route", list(ROUTES))
@pytest.mark.parametrize(("job_id", "says"), [
    ("999999", "no job 999999: there is no Torchyard job 999999 that you may see."),
    ("9" * 23, f"no job {'9' * 23}: there is no Torchyard job {'9' * 23} that you may see."),
    ("dist_job_none", "no job 'dist_job_none': neither a Torchyard job id (digits), a plan's job_id (plan-12) nor "
                      "the job_id you gave a job of yours."),
    ("plan-999999", "no plan plan-999999: there is no task 999999 that you may see."),
])
def test_an_unknown_id_is_a_404_naming_it(api, two_machines, named_job, route, job_id, says):
    response = ask(api, route, two_machines[0].pk, job_id)
    assert response.status_code == 404, response.content
    assert response.json() == {"detail": says}
    assert Job.objects.get().status == "dispatching"


@pytest.mark.parametrize("route", list(ROUTES))
def test_a_malformed_id_is_a_400_on_job_id(api, two_machines, named_job, route):
    response = ask(api, route, two_machines[0].pk, "x" * 101)
    assert response.status_code == 400, response.content
    assert response.json() == {"job_id": ["is 101 characters long; a job_id has at most 100."]}


@pytest.mark.parametrize("route", ["job_status", "stop_job"])
def test_a_job_with_no_node_on_the_machine_is_a_404_by_number_and_by_name(api, two_machines, named_job, route):
    _, b = two_machines
    for job_id, label in ((named_job.pk, f"{named_job.pk}"), (NAME, f"{named_job.pk} ({NAME})")):
        response = ask(api, route, b.pk, job_id)
        assert response.status_code == 404, response.content
        assert response.json() == {"detail": f"job {label} has no node on machine {b.name}."}
    assert ask(api, route, 999999, NAME).status_code == 404
    assert Job.objects.get().status == "dispatching"


def test_a_name_is_its_owners_and_stopping_needs_the_right_to(api, two_machines, named_job, teammate, outsider):
    a, _ = two_machines
    bob, carol = signed_in(teammate), signed_in(outsider)
    # bob sees alice's job by its number (the project's), but remote-7 is alice's name: not his.
    assert bob.get(f"/api/network/local_job_status/{named_job.pk}").status_code == 200
    assert bob.post(f"/api/network/machines/{a.pk}/stop_job/{named_job.pk}").status_code == 403
    for route in ROUTES:
        assert ask(bob, route, a.pk, NAME).status_code == 404, route
        assert ask(carol, route, a.pk, NAME).status_code == 404, route
        assert ask(carol, route, a.pk, named_job.pk).status_code == 404, route
    assert Job.objects.get().status == "dispatching"


# --- a per-rank dispatch's ranks still coming in, a plan ---------------------------------------------
def test_ranks_still_coming_in_answer_on_their_machines_and_have_no_output_yet(api, two_machines):
    a, b = two_machines
    rank = {"job_id": "dist_job_123", "target_machine": a.name, "rank": 0, "world_size": 2, "plugin_name": "mlp_ddp"}
    assert api.post("/api/network/distributed_jobs/dispatch", rank, format="json").status_code == 202
    status = ask(api, "job_status", a.pk, "dist_job_123")
    assert status.status_code == 200, status.content
    assert (status.json()["status"], [n["machine_id"] for n in status.json()["nodes"]]) == ("dispatching", [a.pk])
    elsewhere = ask(api, "job_status", b.pk, "dist_job_123")
    assert elsewhere.status_code == 404
    assert elsewhere.json()["detail"] == (
        f"no rank of 'dist_job_123' targets machine {b.name}: its ranks coming in target {a.name}.")
    assert ask(api, "local_job_status", 0, "dist_job_123").json() == statuses(api, "dist_job_123")
    for route in ("local_job_output", "local_job_file"):
        none_yet = ask(api, route, 0, "dist_job_123")
        assert none_yet.status_code == 404
        assert none_yet.json()["detail"] == (
            "no job 'dist_job_123' yet: 1 of 2 ranks dispatched; waiting for rank(s) 1 (the job is submitted once "
            "every rank has come).")

    stopped = ask(api, "stop_job", a.pk, "dist_job_123")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["status"], [n["machine_id"] for n in stopped.json()["nodes"]]) == ("stopped", [a.pk])
    assert not RankDispatch.objects.exists() and not Job.objects.exists()


def test_a_plan_has_no_node_nor_output_until_it_is_queued_then_its_id_follows_the_job(api, two_machines):
    a, _ = two_machines
    plan = api.post("/api/network/distributed/plan", {"plugin_name": "mlp_ddp", "resource_requirements": {
        "num_machines": 1}, "machine_selection": "manual", "selected_machines": [a.name]}, format="json").json()
    job_id, task_id = plan["job_id"], plan["task_id"]
    assert ask(api, "local_job_status", 0, job_id).json()["status"] == "planned"
    for route in ("job_status", "stop_job"):
        never = ask(api, route, a.pk, job_id)
        assert never.status_code == 404
        assert never.json()["detail"] == (f"{job_id} was never queued: it has no node on machine {a.name} "
                                          f"(GET /api/network/distributed/status/{job_id} answers the plan).")
    no_output = ask(api, "local_job_output", 0, job_id)
    assert no_output.status_code == 404
    assert no_output.json()["detail"] == (
        f"no job of {job_id} yet: it is planned, not queued: queue it with POST /api/tasks/{task_id}/queue_distributed "
        f'or POST /api/network/distributed/dispatch {{"job_id": "{job_id}"}}.')

    job = Job.objects.get(pk=api.post(f"/api/tasks/{task_id}/queue_distributed").json()["job_id"])
    assert ask(api, "job_status", a.pk, job_id).json()["job_id"] == job.pk  # pinned to gpu-a
    assert ask(api, "local_job_output", 0, job_id).json()["job_id"] == job.pk
    stopped = ask(api, "stop_job", a.pk, job_id)
    assert (stopped.json()["job_id"], stopped.json()["seed_job_id"], stopped.json()["status"]) == (
        job.pk, job_id, "stopped")


# --- execute_job's own job_id ----------------------------------------------------------------------
def execute(api, job_id, **more):
    return api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": job_id, **more}, format="json")


def test_execute_job_names_a_new_job_refuses_a_name_in_use_and_takes_it_again_once_ended(api, two_machines):
    first = execute(api, "dist_job_123")
    assert first.status_code == 201 and first.json()["seed_job_id"] == "dist_job_123"
    job = Job.objects.get()
    again = execute(api, "dist_job_123")
    assert again.status_code == 400
    assert again.json() == {"job_id": [
        f"your job dist_job_123 (job {job.pk}) is still queued: stop it first (POST "
        "/api/network/distributed/stop/dist_job_123), or give this job another job_id."]}
    assert Job.objects.count() == 1
    assert api.post("/api/network/distributed/stop/dist_job_123").json()["status"] == "stopped"
    second = execute(api, "dist_job_123")
    assert second.status_code == 201 and second.json()["job_id"] != job.pk
    assert ask(api, "local_job_status", 0, "dist_job_123").json()["job_id"] == second.json()["job_id"]
    unnamed = execute(api, None)
    assert unnamed.status_code == 201 and unnamed.json()["seed_job_id"] is None


@pytest.mark.parametrize(("job_id", "says"), [
    ("42", "42 is a Torchyard job id (digits name a submitted job on every route): name your job with letters "
           "(dist_job_123), or leave job_id out."),
    (42, "42 is a Torchyard job id (digits name a submitted job on every route): name your job with letters "
         "(dist_job_123), or leave job_id out."),
    ("plan-12", "plan-12 is a plan's job_id (plan-<number>, which distributed/plan answers): it names the plan, not "
                'a job of your own. Run the plan with POST /api/network/distributed/dispatch {"job_id": "plan-12"} '
                "(or POST /api/tasks/12/queue/{machine_id}: all of it on one machine), or name your own job "
                "otherwise (dist_job_123)."),
    ("a/b", "'a/b' has a '/', which the status and stop routes' paths cannot carry: name your job without it "
            "(dist_job_123)."),
    ("x" * 101, "Ensure this field has no more than 100 characters."),
    ("", "This field may not be blank."),
    (["dist_job_123"], "Not a valid string."),
])
def test_execute_job_refuses_an_id_it_cannot_name_a_job_with_saying_what_to_send(api, two_machines, job_id, says):
    refused = execute(api, job_id)
    assert refused.status_code == 400, refused.content
    assert refused.json() == {"job_id": [says]}
    assert not Job.objects.exists()


def test_execute_job_refuses_a_plans_id_even_of_an_existing_plan(api, two_machines):
    plan = api.post("/api/network/distributed/plan", {"plugin_name": "mlp_ddp"}, format="json").json()
    refused = execute(api, plan["job_id"])
    assert refused.status_code == 400
    assert refused.json()["job_id"][0].startswith(f"{plan['job_id']} is a plan's job_id")
    assert f"POST /api/tasks/{plan['task_id']}/queue/{{machine_id}}" in refused.json()["job_id"][0]
    assert not Job.objects.exists()

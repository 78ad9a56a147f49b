"""A whole job under the caller's own TransformerLab job_id (a DistributedTrainingConfig dispatched with
`"job_id": "dist_job_123"`, or execute_job's `job_id`): polled and stopped by that id on every
spelling of the status and stop routes, one live job per id and user, and an id shared in turn with
per-rank dispatches."""

from __future__ import annotations

import pytest
from clients import signed_in
from torchyard_server.compat.transformerlab.models import NamedJob
from torchyard_server.jobs.models import Job

from .status_routes import status_urls, statuses

pytestmark = pytest.mark.django_db

PLAN = {"plugin_name": "mlp_ddp", "config": {"batch_size": 64, "lr": 0.001},
        "resource_requirements": {"num_machines": 2, "procs_per_machine": 2}}
NAMED = {**PLAN, "job_id": "dist_job_123"}
SPEC = {"name": "remote", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "20"],
        "resources": {"nodes": 1, "procs_per_node": 2}, "hyperparameters": {"batch_size": 64}}


def dispatch(api, body, url="/api/network/distributed/dispatch"):
    return api.post(url, body, format="json")


def held(key: str, job: Job, state: str = "queued") -> str:
    return (f"your job {key} (job {job.pk}) is still {state}: stop it first (POST /api/network/distributed/stop/{key}), "
            "or give this job another job_id.")


@pytest.mark.parametrize("url", ["/api/network/distributed/dispatch", "/api/network/distributed_jobs/dispatch"])
def test_a_whole_jobs_own_job_id_is_polled_and_stopped_on_every_spelling(api, two_machines, url):
    submitted = dispatch(api, NAMED, url)
    assert submitted.status_code == 201, submitted.content
    job = Job.objects.get()
    assert (submitted.json()["job_id"], submitted.json()["seed_job_id"], submitted.json()["status"]) == (
        job.pk, "dist_job_123", "queued")
    # The job as the body describes it, named after the caller's id.
    assert job.name == "dist_job_123" and job.spec["resources"]["nodes"] == 2
    assert job.spec["hyperparameters"]["lr"] == 0.001 and job.spec["placement"]["policy"] == "spread"

    body = statuses(api, "dist_job_123")
    assert (body["job_id"], body["seed_job_id"], body["status"]) == (job.pk, "dist_job_123", "queued")
    # Torchyard's own id still answers it, as a job of its own.
    assert api.get(f"/api/network/distributed/status/{job.pk}").json()["job_id"] == job.pk

    stopped = api.post("/api/network/distributed/stop/dist_job_123")
    assert stopped.status_code == 200, stopped.content
    assert (stopped.json()["job_id"], stopped.json()["seed_job_id"], stopped.json()["status"]) == (
        job.pk, "dist_job_123", "stopped")
    job.refresh_from_db()
    assert job.status == "stopped" and statuses(api, "dist_job_123")["status"] == "stopped"


def test_a_second_job_under_a_live_id_is_refused_and_takes_the_id_once_the_first_has_ended(api, two_machines):
    first = dispatch(api, NAMED).json()["job_id"]
    again = dispatch(api, {**NAMED, "config": {"lr": 0.01}})
    assert again.status_code == 400
    assert again.json()["job_id"] == [held("dist_job_123", Job.objects.get(pk=first))]
    assert Job.objects.count() == 1

    # Stopping: refused until it has stopped.
    Job.objects.filter(pk=first).update(status="stopping")
    stopping = dispatch(api, NAMED)
    assert stopping.json()["job_id"] == [
        f"your job dist_job_123 (job {first}) is still stopping: wait until it has stopped, or give this job "
        "another job_id."]
    Job.objects.filter(pk=first).update(status="stopped")

    second = dispatch(api, {**NAMED, "config": {"lr": 0.01}})
    assert second.status_code == 201, second.content
    assert second.json()["job_id"] != first and second.json()["seed_job_id"] == "dist_job_123"
    # The id follows the newest job; the first keeps its own id.
    assert statuses(api, "dist_job_123")["job_id"] == second.json()["job_id"]
    assert api.get(f"/api/network/distributed/status/{first}").json()["status"] == "stopped"
    assert NamedJob.objects.get().job_id == second.json()["job_id"]


def test_one_id_names_a_whole_job_or_ranks_coming_in_never_both_at_once(api, two_machines):
    a, b = two_machines
    rank = {"job_id": "dist_job_123", "target_machine": a.name, "rank": 0, "world_size": 2, "plugin_name": "mlp_ddp"}
    assert dispatch(api, rank).status_code == 202
    whole = dispatch(api, NAMED)
    assert whole.status_code == 400
    assert whole.json()["job_id"] == [
        "ranks of your job dist_job_123 are coming in (rank(s) 0 of 2): send the others, or drop them "
        "(POST /api/network/distributed/stop/dist_job_123), or give this job another job_id."]

    job = Job.objects.get(pk=dispatch(api, {**NAMED, "job_id": "dist_job_7"}).json()["job_id"])
    refused = dispatch(api, {**rank, "job_id": "dist_job_7"})
    assert refused.status_code == 400 and refused.json()["job_id"] == [held("dist_job_7", job)]
    # Once the whole job has ended, ranks may take the id: it names them, then the job they became.
    api.post("/api/network/distributed/stop/dist_job_7")
    assert dispatch(api, {**rank, "job_id": "dist_job_7"}).status_code == 202
    assert statuses_of_ranks(api, "dist_job_7") == (None, "dispatching")
    made = dispatch(api, {**rank, "job_id": "dist_job_7", "target_machine": b.name, "rank": 1})
    assert made.status_code == 201, made.content
    assert statuses_of_ranks(api, "dist_job_7") == (made.json()["job_id"], "queued")
    # And a whole job takes it back once that job has ended.
    api.post("/api/network/distributed/stop/dist_job_7")
    latest = dispatch(api, {**NAMED, "job_id": "dist_job_7"})
    assert latest.status_code == 201 and statuses_of_ranks(api, "dist_job_7") == (latest.json()["job_id"], "queued")


def statuses_of_ranks(api, job_id) -> tuple:
    body = api.get(f"/api/network/distributed_jobs/{job_id}/status").json()
    return body["job_id"], body["status"]


def test_an_id_is_each_users_own(api, two_machines, teammate, outsider):
    mine = dispatch(api, NAMED).json()["job_id"]
    bob = signed_in(teammate)
    # bob's dist_job_123 is his, even while alice's is live; each polls and stops their own.
    his = dispatch(bob, NAMED)
    assert his.status_code == 201, his.content
    assert bob.get("/api/network/distributed/status/dist_job_123").json()["job_id"] == his.json()["job_id"] != mine
    assert api.get("/api/network/distributed/status/dist_job_123").json()["job_id"] == mine
    assert bob.post("/api/network/distributed/stop/dist_job_123").json()["status"] == "stopped"
    assert Job.objects.get(pk=mine).status == "queued"
    carol = signed_in(outsider)
    for url in status_urls("dist_job_123"):
        assert carol.get(url).status_code == 404, url


@pytest.mark.parametrize(("job_id", "says"), [
    ("a/b", "'a/b' has a '/', which the status and stop routes' paths cannot carry: name your job without it "
            "(dist_job_123)."),
    ("x" * 101, "Ensure this field has no more than 100 characters."),
])
def test_a_whole_jobs_id_the_routes_could_not_take_is_refused(api, two_machines, job_id, says):
    refused = dispatch(api, {**NAMED, "job_id": job_id})
    assert refused.status_code == 400, refused.content
    assert refused.json()["job_id"] == [says]
    assert not Job.objects.exists()


def test_a_remote_jobs_own_id_is_polled_and_stopped_as_a_whole_jobs(api, two_machines):
    target = two_machines[1]
    ran = api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": "remote-7", "target_machine": target.name},
                   format="json")
    assert ran.status_code == 201, ran.content
    job = Job.objects.get()
    assert ran.json()["seed_job_id"] == "remote-7"
    body = statuses(api, "remote-7")
    assert (body["job_id"], body["seed_job_id"]) == (job.pk, "remote-7")
    # The same id again while it runs: refused, as a whole-job dispatch's.
    twice = api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": "remote-7"}, format="json")
    assert twice.status_code == 400 and twice.json()["job_id"] == [held("remote-7", job)]
    taken = dispatch(api, {**NAMED, "job_id": "remote-7"})
    assert taken.status_code == 400 and taken.json()["job_id"] == [held("remote-7", job)]

    stopped = api.post("/api/network/distributed/stop/remote-7")
    assert stopped.status_code == 200 and stopped.json()["status"] == "stopped"
    assert Job.objects.get().status == "stopped"


def test_a_remote_job_may_not_be_named_with_digits(api, two_machines):
    refused = api.post("/api/network/execute_job", {"job_data": SPEC, "job_id": "42"}, format="json")
    assert refused.status_code == 400
    assert refused.json()["job_id"] == [
        "42 is a Torchyard job id (digits name a submitted job on every route): name your job with letters "
        "(dist_job_123), or leave job_id out."]
    assert not Job.objects.exists()

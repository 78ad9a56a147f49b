"""The Rust coordinator's job summaries: GET /api/jobs/{id}/summary and /api/jobs/summaries (every visible job),
with steps/s and samples/s apart and an ETA from the total the script declared."""

from __future__ import annotations

import datetime as dt

import pytest
from clients import signed_in
from django.utils import timezone
from factories import make_job
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.control.metrics import job_record_progress
from torchyard_server.jobs.control.submit import _initial_progress
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.projects.models import Membership, Project

pytestmark = pytest.mark.django_db

FIELDS = {
    "id", "name", "project", "owner", "status", "status_reason", "attempt", "restarts", "world_size", "step",
    "total_steps", "percent", "steps_per_second", "samples_per_second", "throughput", "loss", "eta_seconds",
    "created_at", "started_at", "finished_at", "duration_seconds", "checkpoints", "last_checkpoint_step",
    "progress", "nodes",
}


@pytest.fixture
def running(owner):
    spec = {"args": ["--steps", "50"]}
    job = Job.objects.create(name="train", spec=spec, owner=owner, status=Job.Status.RUNNING, world_size=2,
                             started_at=timezone.now() - dt.timedelta(seconds=30),
                             progress=_initial_progress(JobSpec.from_json(spec)).to_json())
    JobNode.objects.create(job=job, attempt=0, machine_name="local-0", host="127.0.0.1", node_rank=0, nproc=2,
                           rank_start=0, rank_end=1, status=JobNode.Status.RUNNING)
    for step in (10, 20):
        CheckpointManifest.objects.create(job=job, step=step, uri=f"file:///x/{step}/manifest.json",
                                          committed_at=timezone.now())
    return job


def test_rates_come_from_the_events_and_the_eta_from_the_declared_total(api, running):
    assert running.progress["total_steps"] == 50  # `--steps` until the script says otherwise
    job_record_progress(job_id=running.pk, metrics=[
        {"rank": 0, "step": 10, "loss": 0.9, "throughput": 50.0, "ts": 1000.0},
        {"rank": 1, "step": 10, "loss": 0.8, "throughput": 999.0, "samples_per_second": 60.0, "ts": 1000.2},
    ])
    job_record_progress(job_id=running.pk, metrics=[
        {"rank": 0, "step": 30, "loss": 0.5, "throughput": 55.0, "total_steps": 110, "ts": 1010.0},
    ])
    body = api.get(f"/api/jobs/{running.pk}/summary").json()
    assert set(body) == FIELDS
    assert (body["step"], body["total_steps"], body["percent"]) == (30, 110, pytest.approx(100 * 30 / 110))
    assert body["steps_per_second"] == pytest.approx(20 / 10)  # steps 10 -> 30 in 10 s of the events' time
    assert body["samples_per_second"] == pytest.approx(55.0 + 60.0)  # rank 1 said samples/s itself
    assert body["throughput"] == pytest.approx(55.0 + 999.0)
    assert body["eta_seconds"] == pytest.approx((110 - 30) / 2.0)
    assert (body["loss"], body["checkpoints"], body["last_checkpoint_step"]) == (0.5, 2, 20)
    assert (body["id"], body["name"], body["project"], body["owner"], body["status"], body["attempt"],
            body["restarts"], body["world_size"]) == (running.pk, "train", "default", "alice", "running", 0, 0, 2)
    assert body["duration_seconds"] >= 30 and body["finished_at"] is None
    assert [(n["node_rank"], n["status"], n["machine"]["name"]) for n in body["nodes"]] == [(0, "running", "local-0")]


def test_a_late_report_of_an_earlier_attempt_folds_into_nothing(api, running):
    job_record_progress(job_id=running.pk, metrics=[{"rank": 1, "step": 10, "throughput": 40.0, "attempt": 0}])
    # A recovery dispatched attempt 1 (which resets the ranks' figures); attempt 0's last report
    # arrives after it.
    Job.objects.filter(pk=running.pk).update(attempt=1, progress={**running.progress, "throughput_by_rank": {},
                                                                  "throughput": None, "step_by_rank": {}})
    job_record_progress(job_id=running.pk, metrics=[{"rank": 1, "step": 12, "throughput": 41.0, "attempt": 0}])
    job_record_progress(job_id=running.pk, metrics=[{"rank": 0, "step": 11, "throughput": 7.0, "attempt": 1}])
    progress = Job.objects.get(pk=running.pk).progress
    assert (progress["throughput_by_rank"], progress["throughput"], progress["step_by_rank"]) == ({"0": 7.0}, 7.0, {"0": 11})


def test_summaries_list_only_the_jobs_a_user_may_see(staff_api, running, django_user_model):
    oz = django_user_model.objects.create_user("oz")
    lab = Project.objects.create(name="lab")
    Membership.objects.filter(user=oz).delete()
    Membership.objects.create(project=lab, user=oz, role="viewer")
    theirs = make_job(name="lab-job", owner=running.owner, project=lab,
                                status=Job.Status.COMPLETED)
    everything = staff_api.get("/api/jobs/summaries").json()
    assert [j["id"] for j in everything] == [theirs.pk, running.pk]
    assert all(set(j) == FIELDS for j in everything)
    assert everything[1] == staff_api.get(f"/api/jobs/{running.pk}/summary").json() | {
        "duration_seconds": everything[1]["duration_seconds"]}
    assert [j["id"] for j in signed_in(oz).get("/api/jobs/summaries").json()] == [theirs.pk]
    assert [j["id"] for j in staff_api.get("/api/jobs/summaries?status=running,failed").json()] == [running.pk]
    assert [j["id"] for j in staff_api.get("/api/jobs/summaries?project=lab&limit=1").json()] == [theirs.pk]
    bad = staff_api.get("/api/jobs/summaries?status=sleeping")
    assert bad.status_code == 400 and "status" in bad.json()

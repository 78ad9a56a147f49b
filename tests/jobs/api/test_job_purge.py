"""The Rust coordinator's `POST /api/jobs/purge`: finished jobs older than an age go, with their nodes, events,
checkpoints and artifacts, files in the store included; staff anywhere, a project's admin in that
project; a dry run deletes nothing and answers the same."""

from __future__ import annotations

import datetime as dt
import hashlib

import pytest
from clients import signed_in
from django.utils import timezone
from factories import make_job
from torchyard_server.artifacts.models import Artifact
from torchyard_server.artifacts.services import artifacts_record
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db
JOB_FIELDS = {"id", "name", "project", "status", "finished_at", "deleted", "nodes", "events", "checkpoints",
              "artifacts", "stored_files", "stored_bytes", "error"}


def old_job(owner, project, store, *, name, status=Job.Status.COMPLETED, days=10, files=True) -> Job:
    ended = timezone.now() - dt.timedelta(days=days)
    job = make_job(name=name, owner=owner, project=project, status=status, finished_at=ended)
    Job.objects.filter(pk=job.pk).update(created_at=ended - dt.timedelta(hours=1))
    JobNode.objects.create(job=job, attempt=0, machine_name="m", host="h", node_rank=0, nproc=1, rank_start=0,
                           rank_end=0, status=JobNode.Status.COMPLETED)
    JobEvent.objects.bulk_create([JobEvent(job=job, type="log", ts=ended, payload={"line": str(i)},
                                           dedupe_key=f"p{job.pk}:{i}") for i in range(5)])
    if files:
        folder = store / f"job-{job.pk}" / "checkpoints" / "step-10"
        folder.mkdir(parents=True)
        (folder / "w.bin").write_bytes(b"w" * 100)
        (folder / "manifest.json").write_text("{}")
        CheckpointManifest.objects.create(job=job, step=10, uri=(folder / "manifest.json").as_uri(),
                                          committed_at=ended)
        out = store / f"job-{job.pk}" / "artifacts" / "attempt-0" / "node-0"
        out.mkdir(parents=True)
        (out / "model.txt").write_bytes(b"m" * 7)
        artifacts_record(event={"job": job.pk, "attempt": 0, "node_rank": 0, "files": [
            {"path": "model.txt", "size": 7, "sha256": hashlib.sha256(b"m" * 7).hexdigest(),
             "uri": (out / "model.txt").as_uri()}]})
    return job


@pytest.fixture
def world(settings, tmp_path, owner, django_user_model):
    store = tmp_path / "store"
    settings.STORAGE_URL = store.as_uri()
    ada, mia = django_user_model.objects.create_user("ada"), django_user_model.objects.create_user("mia")
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=ada, role="admin")
    Membership.objects.create(project=lab, user=mia, role="member")
    default = Project.objects.get(name="default")
    jobs = {
        "lab_old": old_job(ada, lab, store, name="lab-old"),
        "default_old": old_job(owner, default, store, name="default-old", status=Job.Status.FAILED, days=30),
        "lab_recent": old_job(ada, lab, store, name="lab-recent", days=1, files=False),
        "lab_running": make_job(name="lab-running", owner=ada, project=lab, status=Job.Status.RUNNING),
    }
    Job.objects.filter(pk=jobs["lab_running"].pk).update(created_at=timezone.now() - dt.timedelta(days=60))
    return {"store": store, "ada": ada, "mia": mia, "jobs": jobs}


def test_a_dry_run_says_what_would_go_and_deletes_nothing(staff_api, world):
    body = staff_api.post("/api/jobs/purge", {"older_than_days": 7, "dry_run": True}, format="json").json()
    old, lab = world["jobs"]["default_old"], world["jobs"]["lab_old"]
    assert [j["id"] for j in body["jobs"]] == [old.pk, lab.pk]  # oldest first
    first = body["jobs"][0]
    assert set(first) == JOB_FIELDS
    assert {k: first[k] for k in JOB_FIELDS - {"finished_at"}} == {
        "id": old.pk, "name": "default-old", "project": "default", "status": "failed", "deleted": False,
        "nodes": 1, "events": 5, "checkpoints": 1, "artifacts": 1, "stored_files": 3, "stored_bytes": 100 + 2 + 7,
        "error": None}
    assert body["dry_run"] is True and body["remaining"] == 0
    assert body["totals"] == {"jobs": 2, "nodes": 2, "events": 10, "checkpoints": 2, "artifacts": 2,
                              "stored_files": 6, "stored_bytes": 218}
    assert Job.objects.count() == 4 and (world["store"] / f"job-{old.pk}").exists()


def test_a_project_admin_purges_that_projects_old_jobs_with_their_rows_and_files(world):
    lab_old = world["jobs"]["lab_old"]
    body = signed_in(world["ada"]).post("/api/jobs/purge", {"older_than_days": 7}, format="json").json()
    assert [(j["id"], j["deleted"]) for j in body["jobs"]] == [(lab_old.pk, True)]
    assert body["totals"]["jobs"] == 1 and body["dry_run"] is False
    assert not Job.objects.filter(pk=lab_old.pk).exists()
    for model in (JobNode, JobEvent, CheckpointManifest, Artifact):
        assert not model.objects.filter(job_id=lab_old.pk).exists(), model
    assert not (world["store"] / f"job-{lab_old.pk}").exists()
    # The default project's old job is not hers to purge; recent and running jobs stay.
    assert set(Job.objects.values_list("name", flat=True)) == {"default-old", "lab-recent", "lab-running"}
    assert (world["store"] / f"job-{world['jobs']['default_old'].pk}" / "checkpoints" / "step-10" / "w.bin").exists()


def test_staff_narrow_a_purge_by_project_status_and_limit(staff_api, world):
    body = staff_api.post("/api/jobs/purge", {"older_than_days": 0, "project": "lab", "statuses": ["completed"],
                                        "limit": 1}, format="json").json()
    assert [j["name"] for j in body["jobs"]] == ["lab-old"] and body["remaining"] == 1  # lab-recent next
    body = staff_api.post("/api/jobs/purge", {"older_than_days": 0, "statuses": ["stopped"]}, format="json").json()
    assert body["jobs"] == [] and body["totals"]["jobs"] == 0


def test_only_staff_and_project_admins_may_purge(world):
    mia, ada = signed_in(world["mia"]), signed_in(world["ada"])
    assert mia.post("/api/jobs/purge", {"older_than_days": 1}, format="json").status_code == 403
    assert ada.post("/api/jobs/purge", {"older_than_days": 1, "project": "default"}, format="json").status_code == 403
    assert ada.post("/api/jobs/purge", {"older_than_days": 1, "project": "nowhere"}, format="json").status_code == 404
    assert Job.objects.count() == 4


@pytest.mark.parametrize(("body", "field"), [
    ({}, "older_than_days"),
    ({"older_than_days": -1}, "older_than_days"),
    ({"older_than_days": 1, "statuses": ["running"]}, "statuses"),
    ({"older_than_days": 1, "limit": 0}, "limit"),
])
def test_bad_input_is_a_400_naming_the_field(api, world, body, field):
    response = api.post("/api/jobs/purge", body, format="json")
    assert response.status_code == 400 and field in response.json()

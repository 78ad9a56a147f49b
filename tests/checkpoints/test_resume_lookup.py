"""jobs asks for the manifest a recovered job resumes from through its registry; checkpoints answers."""

import pytest
from django.utils import timezone
from factories import make_job
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.registries import resume_manifest_uri

pytestmark = pytest.mark.django_db


def test_the_next_attempt_resumes_from_the_newest_manifest_neither_corrupt_nor_deleted(owner):
    job = make_job(name="j", owner=owner)
    for step, uri, extra in [(10, "file:///j/10", {}), (20, "file:///j/20", {"verified": False}),
                             (30, "file:///j/30", {"deleted": True})]:
        CheckpointManifest.objects.create(job=job, step=step, uri=uri, committed_at=timezone.now(), **extra)
    assert resume_manifest_uri(job_id=job.pk) == "file:///j/10"


def test_a_job_without_checkpoints_starts_from_scratch(owner):
    assert resume_manifest_uri(job_id=make_job(name="j", owner=owner).pk) == ""

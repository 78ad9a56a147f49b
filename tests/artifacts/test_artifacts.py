"""Artifacts: recorded from a node's `artifact` event only when they lie in the job's own folder,
listed, downloaded one by one (whatever the client accepts) or as one zip, and through seed 000's
aliases."""

from __future__ import annotations

import hashlib
import io
import zipfile

import pytest
from clients import downloaded
from factories import make_job
from torchyard_server.artifacts.services import artifacts_record

pytestmark = pytest.mark.django_db


@pytest.fixture
def job_with_outputs(settings, tmp_path, owner):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    job = make_job(name="outputs", owner=owner)
    folder = tmp_path / "store" / f"job-{job.pk}" / "artifacts" / "attempt-0" / "node-1"
    (folder / "sub").mkdir(parents=True)
    files = []
    for path, body in (("model.txt", b"weights\n"), ("sub/log.csv", b"1,2\n")):
        (folder / path).write_bytes(body)
        files.append({"path": path, "size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
                      "uri": (folder / path).as_uri()})
    (tmp_path / "secret.txt").write_text("not yours")
    files.append({"path": "escape.txt", "size": 9, "sha256": "0" * 64, "uri": (tmp_path / "secret.txt").as_uri()})
    artifacts_record(event={"job": job.pk, "attempt": 0, "node_rank": 1, "files": files})
    artifacts_record(event={"job": job.pk, "attempt": 0, "node_rank": 1, "files": files})  # redelivered: once
    return job


def test_outputs_are_listed_and_served_but_never_from_outside_the_job(api, job_with_outputs):
    job = job_with_outputs
    listed = api.get(f"/api/jobs/{job.pk}/artifacts").json()
    assert [(a["node_rank"], a["path"], a["size"]) for a in listed] == [(1, "model.txt", 8), (1, "sub/log.csv", 4)]
    one = api.get(f"/api/jobs/{job.pk}/artifacts/{listed[0]['id']}", HTTP_ACCEPT="application/octet-stream")
    assert one.status_code == 200 and downloaded(one) == b"weights\n"
    assert one["X-Artifact-Sha256"] == listed[0]["sha256"]
    archive = api.get(f"/api/jobs/{job.pk}/artifacts/archive")
    with zipfile.ZipFile(io.BytesIO(downloaded(archive))) as zipped:
        assert zipped.namelist() == ["attempt-0/node-1/model.txt", "attempt-0/node-1/sub/log.csv"]
        assert zipped.read("attempt-0/node-1/sub/log.csv") == b"1,2\n"
    alias = api.get(f"/api/network/local_job_file/{job.pk}/sub/log.csv")
    assert downloaded(alias) == b"1,2\n"
    assert api.get(f"/api/network/local_job_file/{job.pk}/escape.txt").status_code == 404
    output = api.get(f"/api/network/local_job_output/{job.pk}").json()
    assert output["status"] == "queued" and [f["path"] for f in output["files"]] == ["model.txt", "sub/log.csv"]
    assert api.get(f"/api/jobs/{job.pk}/artifacts/999999").status_code == 404

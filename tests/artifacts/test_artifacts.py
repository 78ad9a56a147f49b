"""Artifacts: recorded from a node's `artifact` event only when they lie in the job's own folder,
listed, downloaded one by one (whatever the client accepts) or as one zip, and through TransformerLab's
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


@pytest.mark.django_db(transaction=True)
async def test_a_download_through_the_asgi_application_goes_out_in_one_mib_pieces(settings, tmp_path, owner):
    """Django gives every file response its handler's chunk size as block size and reads each block
    in a thread; at its 64 KiB a bundle's download to a node was mostly thread hops (issue 18).
    Through the application daphne serves, a 2.5 MiB artifact is three body messages."""
    from asgiref.sync import sync_to_async
    from asgiref.testing import ApplicationCommunicator
    from clients import token_for
    from django.db import connections
    from torchyard_server.asgi import application

    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    body = bytes(range(256)) * (10 << 10)  # 2.5 MiB
    job = await sync_to_async(make_job)(name="big-output", owner=owner)
    folder = tmp_path / "store" / f"job-{job.pk}" / "artifacts" / "attempt-0" / "node-0"
    folder.mkdir(parents=True)
    (folder / "model.bin").write_bytes(body)
    await sync_to_async(artifacts_record)(event={"job": job.pk, "attempt": 0, "node_rank": 0, "files": [{
        "path": "model.bin", "size": len(body), "sha256": hashlib.sha256(body).hexdigest(),
        "uri": (folder / "model.bin").as_uri()}]})
    path = f"/api/jobs/{job.pk}/artifacts/{(await job.artifacts.aget()).pk}"
    key = await sync_to_async(token_for)(owner)
    client = ApplicationCommunicator(application, {
        "type": "http", "http_version": "1.1", "method": "GET", "path": path, "raw_path": path.encode(),
        "query_string": b"", "root_path": "", "scheme": "http", "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 5000),
        "headers": [(b"authorization", f"Token {key}".encode()), (b"accept", b"application/octet-stream")]})
    try:
        await client.send_input({"type": "http.request", "body": b"", "more_body": False})
        start = await client.receive_output(timeout=10)
        assert start["type"] == "http.response.start" and start["status"] == 200, start
        pieces = []
        while True:
            message = await client.receive_output(timeout=10)
            pieces.append(message.get("body", b""))
            if not message.get("more_body"):
                break
    finally:
        # The view ran on asgiref's thread for sync code: its connection would outlive the test.
        await sync_to_async(connections.close_all)()
    assert b"".join(pieces) == body
    assert [len(piece) for piece in pieces if piece] == [1 << 20, 1 << 20, 512 << 10]

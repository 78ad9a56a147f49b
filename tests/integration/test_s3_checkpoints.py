"""Checkpoints on S3 (a real SeaweedFS S3 gateway on loopback): a job commits manifests there, the
control plane records them, serves them back byte for byte, and retention keeps the newest `keep`."""

from __future__ import annotations

import hashlib
import json

import pytest

from .stack import start_stack


@pytest.fixture(scope="module")
def s3_stack(s3_server, tmp_path_factory):
    bucket = s3_server.create_bucket()
    stack = start_stack(tmp_path_factory.mktemp("s3-stack"), env={
        "TORCHYARD_STORAGE_URL": f"s3://{bucket}/torchyard", **s3_server.env()})
    stack.bucket = bucket
    try:
        yield stack
    finally:
        stack.stop()


def test_a_job_checkpoints_to_s3_and_the_api_serves_the_files_back(s3_server, s3_stack):
    job = s3_stack.submit({
        "name": "s3-checkpoints", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "100"],
        "resources": {"nodes": 2, "procs_per_node": 1},
        "checkpointing": {"enabled": True, "every_n_steps": 20, "keep": 2},
    })
    final = s3_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=150)
    assert final["status"] == "completed", final["status_reason"]

    listed = s3_stack.api("GET", f"/api/jobs/{job['id']}/checkpoints").json()
    assert [c["step"] for c in listed] == [100, 80]
    newest = listed[0]
    assert newest["uri"] == f"s3://{s3_stack.bucket}/torchyard/job-{job['id']}/step-00000100/manifest.json"

    manifest = s3_stack.api("GET", f"/api/jobs/{job['id']}/checkpoints/{newest['id']}").json()
    assert manifest["step"] == 100 and manifest["world_size"] == 2
    for entry in manifest["files"]:
        response = s3_stack.api("GET", f"/api/jobs/{job['id']}/checkpoints/{newest['id']}/files/{entry['path']}")
        assert response.status_code == 200
        assert len(response.content) == entry["size"]
        assert hashlib.sha256(response.content).hexdigest() == entry["sha256"]

    # Retention on the store itself: only the newest two step folders are left.
    objects = s3_server.client().list_objects_v2(Bucket=s3_stack.bucket, Prefix=f"torchyard/job-{job['id']}/")
    steps = {o["Key"].split("/")[2] for o in objects.get("Contents", []) if "/step-" in o["Key"]}
    assert steps == {"step-00000080", "step-00000100"}
    stored = s3_server.client().get_object(Bucket=s3_stack.bucket, Key=f"torchyard/job-{job['id']}/step-00000100/manifest.json")
    assert json.loads(stored["Body"].read())["files"] == manifest["files"]


def test_files_outside_the_manifest_are_not_served(s3_stack):
    jobs = s3_stack.api("GET", "/api/jobs").json()
    job_id = jobs[0]["id"]
    checkpoint = s3_stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json()[0]
    for path in ("../../../etc/passwd", "manifest.json", "nope.pt"):
        response = s3_stack.api("GET", f"/api/jobs/{job_id}/checkpoints/{checkpoint['id']}/files/{path}")
        assert response.status_code == 404, path


def test_code_bundles_and_outputs_live_on_s3_and_nodes_fetch_them_from_there(s3_server, s3_stack, tmp_path):
    from torchyard.bundles import pack_directory

    project = tmp_path / "proj"
    project.mkdir()
    (project / "write.py").write_text(
        "import os\nout = os.environ['TORCHYARD_OUTPUT_DIR']\nos.makedirs(out, exist_ok=True)\n"
        "open(os.path.join(out, f\"r{os.environ['RANK']}.txt\"), 'w').write('hello from s3\\n')\n")
    packed = pack_directory(project, tmp_path / "b.tar.zst")
    with open(packed.path, "rb") as body:
        assert s3_stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body).status_code == 201
    stored = s3_server.client().head_object(Bucket=s3_stack.bucket, Key=f"torchyard/bundles/{packed.sha256}.tar.zst")
    assert stored["ContentLength"] == packed.size

    job = s3_stack.submit({"name": "s3-code", "code": {"bundle": packed.sha256}, "entrypoint": "write.py",
                           "resources": {"nodes": 2, "procs_per_node": 1}})
    done = s3_stack.wait_job(job["id"], {"completed", "failed"}, timeout=120)
    assert done["status"] == "completed", done["status_reason"]
    # Straight from S3: no node asked the server for the bundle.
    assert "/api/agent/bundles/" not in s3_stack.log_path.read_text()
    artifacts = s3_stack.api("GET", f"/api/jobs/{job['id']}/artifacts").json()
    assert sorted(a["path"] for a in artifacts) == ["r0.txt", "r1.txt"]
    key = f"torchyard/job-{job['id']}/artifacts/attempt-0/node-1/r1.txt"
    assert s3_server.client().get_object(Bucket=s3_stack.bucket, Key=key)["Body"].read() == b"hello from s3\n"
    one = next(a for a in artifacts if a["path"] == "r1.txt")
    served = s3_stack.api("GET", f"/api/jobs/{job['id']}/artifacts/{one['id']}")
    assert served.content == b"hello from s3\n" and served.headers["X-Artifact-Sha256"] == one["sha256"]

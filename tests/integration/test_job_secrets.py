"""A job's secret_env through the real stack: the rank reads the value, while the API and the stored
logs show only its name and ***."""

from __future__ import annotations

import hashlib

from torchyard.bundles import pack_directory

SECRET = "wandb-s3cr3t-integration-4242"

TRAIN = """
import hashlib, os
secret = os.environ["WANDB_API_KEY"]
print(f"using key {secret}", flush=True)
print(f"digest {hashlib.sha256(secret.encode()).hexdigest()}", flush=True)
"""


def test_a_secret_reaches_the_rank_and_nothing_shows_it(pg_stack, tmp_path):
    project = tmp_path / "secret-project"
    project.mkdir()
    (project / "train.py").write_text(TRAIN)
    packed = pack_directory(project, tmp_path / "bundle.tar.zst")
    with open(packed.path, "rb") as body:
        response = pg_stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                                headers={"Content-Type": "application/octet-stream"})
    assert response.status_code in (200, 201), response.text
    job = pg_stack.submit({"name": "secrets", "code": {"bundle": packed.sha256}, "entrypoint": "train.py",
                           "secret_env": {"WANDB_API_KEY": SECRET}, "fault_tolerance": {"max_restarts": 0}})
    assert job["spec"]["secret_env"] == {"WANDB_API_KEY": "***"}
    done = pg_stack.wait_job(job["id"], {"completed", "failed"})
    assert done["status"] == "completed", pg_stack.job_log_tail(job["id"])

    lines = [e["line"] for e in pg_stack.logs(job["id"])]
    assert "using key ***" in lines
    assert f"digest {hashlib.sha256(SECRET.encode()).hexdigest()}" in lines
    for path in (f"/api/jobs/{job['id']}", "/api/jobs", f"/api/jobs/{job['id']}/events",
                 f"/api/jobs/{job['id']}/logs"):
        assert SECRET not in pg_stack.api("GET", path).text, path


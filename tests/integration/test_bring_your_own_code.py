"""The user's own code, from a directory outside the repository, on 2 nodes x 2 processes: packed,
uploaded once, fetched and verified by every node, its requirements installed into a cached
environment, its outputs collected as artifacts."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from torchyard.bundles import pack_directory

from .user_project import make_project

BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    return make_project(tmp_path_factory.mktemp("user") / "my-project")


def upload(stack, directory: Path, tmp: Path) -> tuple[str, int]:
    """Pack and upload like the CLI; (sha256, HTTP status of the PUT or 0 when HEAD found it)."""
    packed = pack_directory(directory, tmp / "bundle.tar.zst")
    if stack.api("HEAD", f"/api/bundles/{packed.sha256}").status_code == 200:
        return packed.sha256, 0
    with open(packed.path, "rb") as body:
        response = stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                             headers={"Content-Type": "application/octet-stream"})
    assert response.status_code in (200, 201), response.text
    return packed.sha256, response.status_code


def run_cli(stack, *args: str, cwd: Path, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    return subprocess.run([str(BIN / "torchyard"), *args], capture_output=True, text=True, timeout=timeout,
                          env=env, cwd=str(cwd))


def spec_for(sha256: str, **extra) -> dict:
    return {"name": "my-own-code", "code": {"bundle": sha256}, "entrypoint": "train.py",
            "args": ["--lr", "0.1"], "resources": {"nodes": 2, "procs_per_node": 2},
            "fault_tolerance": {"max_restarts": 0}, **extra}


def test_a_project_runs_on_two_nodes_and_its_outputs_come_back(pg_stack, project, tmp_path):
    result = run_cli(pg_stack, "run", "--nnodes", "2", "--nproc-per-node", "2", "--max-restarts", "0",
                     "train.py", "--lr", "0.1", cwd=project)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "== job completed" in result.stdout
    for rank in range(4):
        assert f"[rank {rank}] rank {rank}/4: lr=0.1 tinypkg=42 total=100" in result.stdout
    job_id = int(pg_stack.api("GET", "/api/jobs").json()[0]["id"])
    job = pg_stack.job(job_id)
    assert job["status"] == "completed" and job["spec"]["code"]["bundle"]

    # What the bundle holds: the project minus what .gitignore leaves out.
    bundle = pg_stack.api("GET", f"/api/bundles/{job['spec']['code']['bundle']}").json()
    paths = {f["path"] for f in bundle["files"]}
    assert {"train.py", "helpers.py", "data/numbers.txt", "requirements.txt"} <= paths
    assert not {"scratch/huge.bin", "debug.log"} & paths

    # Nodes prepared (bundle fetched, environment built) before running, and said so.
    logs = [e["line"] for e in pg_stack.logs(job_id)]
    assert any("fetched and unpacked code bundle" in line for line in logs)
    assert any(line.startswith("environment ") and "ready in" in line for line in logs)
    states = [e for e in pg_stack.events(job_id, types="state") if e.get("scope") == "node"]
    assert {e["status"] for e in states} >= {"preparing", "running", "completed"}

    # Every rank's output, per node, downloadable with a matching sha256.
    artifacts = pg_stack.api("GET", f"/api/jobs/{job_id}/artifacts").json()
    assert sorted((a["node_rank"], a["path"]) for a in artifacts) == [
        (0, "rank-0.txt"), (0, "rank-1.txt"), (1, "rank-2.txt"), (1, "rank-3.txt")]
    for artifact in artifacts:
        body = pg_stack.api("GET", f"/api/jobs/{job_id}/artifacts/{artifact['id']}").content
        assert hashlib.sha256(body).hexdigest() == artifact["sha256"] and len(body) == artifact["size"]
        assert body.decode().startswith(f"rank {artifact['path'][5]} of 4")
    out = tmp_path / "downloaded"
    fetched = run_cli(pg_stack, "artifacts", str(job_id), "--out", str(out), cwd=tmp_path)
    assert fetched.returncode == 0, fetched.stdout + fetched.stderr
    assert (out / "attempt-0" / "node-1" / "rank-3.txt").read_text() == "rank 3 of 4: total 100\n"
    assert pg_stack.wait_no_job_processes(job_id) == []

    # The same project again: nothing uploaded, the environment comes from each machine's cache.
    again = run_cli(pg_stack, "run", "--nnodes", "2", "--nproc-per-node", "2", "train.py", "--lr", "0.2",
                    cwd=project)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "already on the server" in again.stdout + again.stderr
    second = int(pg_stack.api("GET", "/api/jobs").json()[0]["id"])
    lines = [e["line"] for e in pg_stack.logs(second)]
    assert sum("is in this machine's cache" in line and line.startswith("environment") for line in lines) == 2
    assert not any("creating environment" in line for line in lines)


def test_a_plain_torchrun_script_that_exits_3_fails_the_job_naming_node_and_rank(pg_stack, project, tmp_path):
    sha256, _ = upload(pg_stack, project, tmp_path)
    job = pg_stack.submit(spec_for(sha256, entrypoint="plain_fail.py", args=["3"]))
    done = pg_stack.wait_job(job["id"], {"failed", "completed"}, timeout=180)
    assert done["status"] == "failed", pg_stack.job_log_tail(job["id"])
    reason = done["status_reason"]
    assert "node 1 (" in reason and "global rank 3" in reason and "exited with code 3" in reason, reason
    assert "rank 3 gives up" in reason
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_a_module_entrypoint_runs_and_a_failed_install_fails_before_any_rank(pg_stack, project, tmp_path):
    pkg = tmp_path / "modproj"
    (pkg / "trainer").mkdir(parents=True)
    (pkg / "trainer" / "__init__.py").write_text("")
    (pkg / "trainer" / "main.py").write_text("import os, sys\nprint('module rank', os.environ['RANK'], sys.argv[1:])\n")
    sha256, status = upload(pg_stack, pkg, tmp_path)
    assert status == 201
    job = pg_stack.submit({"name": "module", "code": {"bundle": sha256}, "module": "trainer.main",
                           "args": ["--x", "1"], "resources": {"nodes": 1, "procs_per_node": 1}})
    done = pg_stack.wait_job(job["id"], {"completed", "failed"}, timeout=120)
    assert done["status"] == "completed", done["status_reason"]
    assert "module rank 0 ['--x', '1']" in [e["line"] for e in pg_stack.logs(job["id"])]

    broken = pg_stack.submit({"name": "broken-deps", "code": {"bundle": sha256}, "module": "trainer.main",
                              "runtime": {"pip": ["./no-such-package-dir"]}, "fault_tolerance": {"max_restarts": 0},
                              "resources": {"nodes": 1, "procs_per_node": 1}})
    failed = pg_stack.wait_job(broken["id"], {"completed", "failed"}, timeout=120)
    assert failed["status"] == "failed"
    assert "installing the requirements failed" in failed["status_reason"], failed["status_reason"]
    assert "torchrun not started" in failed["status_reason"]
    assert not any(e.get("source") == "worker" for e in pg_stack.logs(broken["id"]))


def test_prepare_dependencies_warms_every_machine_before_the_job(pg_stack, tmp_path):
    from .user_project import build_wheel

    project = tmp_path / "warm"
    project.mkdir()
    (project / "show.py").write_text("import tinypkg\nprint('tinypkg', tinypkg.VALUE)\n")
    build_wheel(project / "wheels", value=7)
    (project / "requirements.txt").write_text("./wheels/tinypkg-0.1-py3-none-any.whl\n")
    sha256, _ = upload(pg_stack, project, tmp_path)
    sent = pg_stack.api("POST", "/api/network/prepare_dependencies", json={"bundle": sha256})
    assert sent.status_code == 202, sent.text
    assert sorted(m["name"] for m in sent.json()["machines"]) == ["local-0", "local-1"]

    deadline = time.monotonic() + 90
    while True:
        caches = [m["capabilities"].get("cache") or {} for m in pg_stack.api("GET", "/api/machines").json()]
        if all(sha256 in c.get("bundles", []) and c.get("environments") for c in caches):
            break
        assert time.monotonic() < deadline, caches
        time.sleep(0.5)
    job = pg_stack.submit({"name": "warm", "code": {"bundle": sha256}, "entrypoint": "show.py",
                           "resources": {"nodes": 2, "procs_per_node": 1}})
    done = pg_stack.wait_job(job["id"], {"completed", "failed"}, timeout=120)
    assert done["status"] == "completed", done["status_reason"]
    logs = pg_stack.logs(job["id"])
    assert sorted((e["rank"], e["source"]) for e in logs if e["line"] == "tinypkg 7") == [(0, "worker"), (1, "worker")], logs
    lines = [e["line"] for e in logs]
    assert sum("is in this machine's cache" in line for line in lines) == 4  # bundle and environment, per node
    bad = pg_stack.api("POST", "/api/network/prepare_dependencies", json={"machines": ["nope"], "pip": ["x"]})
    assert bad.status_code == 400 and "not online: nope" in bad.json()["machines"][0]

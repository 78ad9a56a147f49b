"""Volumes across hosts that are really apart (network namespaces, netns.py): the agents declare
them (`torchyard agent --volume`), the planner places by them, each node sees its machine's path
(a link in its working directory and TORCHYARD_VOLUME_<NAME>), and the preflight proves that a
ReadWriteMany volume is one filesystem. The namespaces share this machine's filesystem, so one
directory declared on both hosts is a shared filesystem, and a directory per host is not."""

from __future__ import annotations

import textwrap

import pytest
from torchyard.bundles import pack_directory

from .netns import netns_unavailable, separate_hosts

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

# Rank 1 writes a note through the link on its host; rank 0 waits for it through the link on its own.
SCRIPT = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path

    rank, job = int(os.environ["RANK"]), os.environ["TORCHYARD_JOB_ID"]
    link, path = Path("data"), Path(os.environ["TORCHYARD_VOLUME_SHARED_DATA"])
    if not (link.is_symlink() and link.resolve() == path.resolve()):
        sys.exit(f"rank {rank}: ./data is not a link to {path}")
    note = link / f"job-{job}-note.txt"
    if rank == 1:
        note.write_text(f"written by rank 1 of job {job}")
    else:
        deadline = time.monotonic() + 60
        while not note.exists():
            if time.monotonic() > deadline:
                sys.exit("rank 0: no note from rank 1")
            time.sleep(0.1)
        print(f"rank 0 read: {note.read_text()}", flush=True)
""")


@pytest.fixture(scope="module")
def volumes_cluster(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("volumes")
    shared = tmp / "shared"
    shared.mkdir()
    for index in (0, 1):
        (tmp / f"local-{index}").mkdir()
    declared = [{"shared-data": str(shared), "local-data": str(tmp / f"local-{index}")} for index in (0, 1)]
    with separate_hosts(tmp, hosts=2, volumes=declared) as cluster:
        project = tmp / "project"
        project.mkdir()
        (project / "train.py").write_text(SCRIPT)
        packed = pack_directory(project, tmp / "bundle.tar.zst")
        with open(packed.path, "rb") as body:
            response = cluster.stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                                         headers={"Content-Type": "application/octet-stream"})
        assert response.status_code in (200, 201), response.text
        yield cluster, packed.sha256, shared


def spec(sha256: str, name: str, volume: str) -> dict:
    return {"name": name, "code": {"bundle": sha256}, "entrypoint": "train.py",
            "resources": {"nodes": 2, "procs_per_node": 1}, "fault_tolerance": {"max_restarts": 0},
            "volumes": [{"name": volume, "mount_path": "data"}]}


def test_a_shared_volume_passes_preflight_and_carries_a_file_from_node_1_to_node_0(volumes_cluster):
    cluster, sha256, shared = volumes_cluster
    reported = {v["name"]: v for v in cluster.machine(cluster.hosts[0])["volumes"]}
    assert reported["shared-data"]["exists"] is True and reported["shared-data"]["source"] == "agent"
    assert reported["shared-data"]["total_bytes"] >= reported["shared-data"]["free_bytes"] > 0

    job = cluster.stack.submit(spec(sha256, "shared", "shared-data"))
    done = cluster.stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert done["status"] == "completed", f"{done['status_reason']}\n{cluster.stack.job_log_tail(job['id'])}"
    assert any(f"rank 0 read: written by rank 1 of job {job['id']}" in e["line"] for e in cluster.stack.logs(job["id"]))
    assert {n["volumes"][0]["path"] for n in done["plan"]["nodes"]} == {str(shared)}
    assert not list((shared / ".torchyard").iterdir())  # the preflight's probe files are gone


def test_a_directory_per_host_fails_preflight_naming_both_machines(volumes_cluster):
    cluster, sha256, _ = volumes_cluster
    job = cluster.stack.submit(spec(sha256, "not-shared", "local-data"))
    done = cluster.stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert done["status"] == "failed"
    reason = done["status_reason"]
    assert "volume local-data is not the same filesystem on host-" in reason, reason
    assert "host-0" in reason and "host-1" in reason and "ReadWriteOnce" in reason, reason
    assert not any("rank 0 read" in e["line"] for e in cluster.stack.logs(job["id"]))


def test_a_volume_no_machine_has_is_refused_at_plan_time_per_machine(volumes_cluster):
    cluster, sha256, _ = volumes_cluster
    response = cluster.stack.api("POST", "/api/jobs/plan", json=spec(sha256, "nowhere", "nowhere"))
    assert response.status_code == 400, response.text
    assert {s["machine_name"]: s["reason"] for s in response.json()["skipped"]} == {
        "host-0": "no volume nowhere", "host-1": "no volume nowhere"}


"""The queue on the real stack: five jobs of equal priority queued behind a running one start in the
order they were submitted, one at a time as each frees the cluster; `torchyard queue` shows them;
and the usage of two projects matches their nodes' lifetimes."""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import time

import pytest

# Every job takes both local agents' cores (a 2-core machine each): one runs at a time.
WHOLE_CLUSTER = {"nodes": 2, "procs_per_node": 2}


def spec(name: str, steps: int, project: str = "fifo", **extra) -> dict:
    return {"name": name, "entrypoint": "examples/mlp_ddp.py", "resources": WHOLE_CLUSTER, "project": project,
            "args": ["--steps", str(steps), "--step-sleep", "0.02"], "fault_tolerance": {"max_restarts": 0}, **extra}


def when(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.timeout(600)
def test_five_queued_jobs_start_in_submission_order_and_usage_matches_their_nodes(pg_stack):
    # Two projects of this test's own: the shared stack's default project carries earlier modules' usage.
    for name in ("fifo", "vision"):
        created = pg_stack.api("POST", "/api/projects", json={"name": name})
        assert created.status_code == 201, created.text
    blocker = pg_stack.submit(spec("blocker", 100_000))
    pg_stack.wait_job(blocker["id"], {"running"}, timeout=120)
    queued = [pg_stack.submit(spec(f"fifo-{i}", 30, project="vision" if i % 2 else "fifo"))["id"]
              for i in range(5)]

    deadline = time.monotonic() + 30
    while True:  # a queue pass gives each its reason
        entries = pg_stack.api("GET", "/api/queue").json()["jobs"]
        if [e["id"] for e in entries] == queued and all(e["reason"] != "starting" for e in entries):
            break
        assert time.monotonic() < deadline, entries
        time.sleep(0.5)
    assert [e["position"] for e in entries] == [1, 2, 3, 4, 5]
    assert entries[0]["head"] and entries[0]["reason"].startswith("waiting for 2 machines with room for 2 more processes")
    assert "first in line" in entries[0]["reason"] and entries[1]["reason"].endswith(f"behind #{queued[0]}")
    # The command line shows the same queue.
    cli = subprocess.run([sys.executable, "-m", "torchyard.cli", "queue"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "TORCHYARD_SERVER": pg_stack.base, "TORCHYARD_TOKEN": pg_stack.token,
                              "COLUMNS": "200"})
    assert cli.returncode == 0, cli.stderr
    assert "5 queued job(s)" in cli.stdout and "fifo-0" in cli.stdout and "first in line" in cli.stdout
    as_json = subprocess.run([sys.executable, "-m", "torchyard.cli", "queue", "--json"], capture_output=True,
                             text=True, timeout=60,
                             env={**os.environ, "TORCHYARD_SERVER": pg_stack.base, "TORCHYARD_TOKEN": pg_stack.token})
    assert [e["id"] for e in json.loads(as_json.stdout)["jobs"]] == queued

    assert pg_stack.api("POST", f"/api/jobs/{blocker['id']}/stop").status_code == 202
    finals = [pg_stack.wait_job(job_id, {"completed", "failed", "stopped"}, timeout=240) for job_id in queued]
    assert [f["status"] for f in finals] == ["completed"] * 5, [f["status_reason"] for f in finals]
    starts = [when(f["started_at"]) for f in finals]
    assert starts == sorted(starts), "strict FIFO within a priority"
    for before, after in zip(finals, finals[1:], strict=False):
        # One at a time: each started once the one before it had let the cluster go.
        assert when(after["started_at"]) >= when(before["finished_at"]) - dt.timedelta(seconds=1)

    # Process-seconds per project, as the nodes lived (these machines have no GPUs: GPU-seconds are 0).
    lived: dict[str, float] = {"fifo": 0.0, "vision": 0.0}
    for final in finals:
        for node in final["nodes"]:
            lived[final["project"]] += node["nproc"] * (when(node["finished_at"]) - when(node["started_at"])).total_seconds()
    blocker_final = pg_stack.job(blocker["id"])
    for node in blocker_final["nodes"]:
        lived["fifo"] += node["nproc"] * (when(node["finished_at"]) - when(node["started_at"])).total_seconds()
    usage = {t["key"]: t for t in pg_stack.api("GET", "/api/usage", params={"since": "1h"}).json()["totals"]}
    for project, seconds in lived.items():
        assert usage[project]["process_seconds"] == pytest.approx(seconds, abs=1.0), (project, usage)
        assert usage[project]["gpu_seconds"] == 0

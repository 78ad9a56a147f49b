"""When a rank dies, Torchyard stops the rest and resumes the whole job from the last committed
checkpoint by itself, up to fault_tolerance.max_restarts times."""

from __future__ import annotations

import time

import psutil
import pytest

SPEC = {
    "name": "recover-me",
    "entrypoint": "examples/mlp_ddp.py",
    "resources": {"nodes": 2, "procs_per_node": 1},
    "checkpointing": {"enabled": True, "every_n_steps": 20, "keep": 2},
    "fault_tolerance": {"max_restarts": 1, "heartbeat_timeout": 10},
}


# DDP's replicated checkpoints, and FSDP's sharded ones (torch.distributed.checkpoint, every rank's files).
@pytest.mark.parametrize("recipe", ["mlp_ddp.py", "mlp_fsdp.py"])
def test_a_killed_rank_is_recovered_from_the_last_checkpoint_and_the_job_completes(pg_stack, recipe):
    job = pg_stack.submit(dict(SPEC, entrypoint=f"examples/{recipe}", args=["--steps", "140", "--step-sleep", "0.05"]))
    checkpoint = pg_stack.wait_checkpoint(job["id"])
    pg_stack.kill_rank(job["id"], "1", "0", recipe)

    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", f"{final['status_reason']}\n{pg_stack.job_log_tail(job['id'])}"
    assert final["attempt"] == 1
    states = [e["status"] for e in pg_stack.events(job["id"], "state") if e.get("scope") == "job"]
    assert states == ["queued", "planning", "dispatching", "running", "recovering", "dispatching", "running",
                      "completed"]
    recovering = [e for e in pg_stack.events(job["id"], "state") if e.get("status") == "recovering"][0]
    assert "node 1 (local-1)" in recovering["reason"]

    logs = pg_stack.logs(job["id"])
    resumed = [e for e in logs if e["attempt"] == 1 and "resumed from checkpoint at step" in e["line"]]
    assert {e["rank"] for e in resumed} == {0, 1}
    resumed_step = int(resumed[0]["line"].rsplit(" ", 1)[-1])
    assert resumed_step >= checkpoint["step"] > 0
    second = [e["step"] for e in pg_stack.events(job["id"], "metric") if e["attempt"] == 1]
    assert min(second) > resumed_step and max(second) == 140
    assert pg_stack.wait_no_job_processes(job["id"]) == []
    if recipe == "mlp_fsdp.py":
        assert {f["path"] for f in checkpoint["files"]} >= {".metadata", "__0_0.distcp", "__1_0.distcp"}


def test_the_job_fails_once_its_restarts_are_used_up(pg_stack):
    job = pg_stack.submit(dict(SPEC, name="fail-twice", args=["--steps", "100000", "--step-sleep", "0.05"]))
    pg_stack.wait_checkpoint(job["id"])
    pg_stack.kill_rank(job["id"], "0", "0")
    deadline = time.monotonic() + 120
    while not any(e["attempt"] == 1 for e in pg_stack.events(job["id"], "metric")):
        assert time.monotonic() < deadline, f"attempt 1 never trained:\n{pg_stack.log_tail()}"
        time.sleep(0.5)
    pg_stack.kill_rank(job["id"], "0", "1")
    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=90)
    assert final["status"] == "failed"
    assert "gave up after 1 restart" in final["status_reason"]
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_a_node_that_goes_silent_is_declared_lost_and_the_job_recovers(pg_stack):
    """A whole machine dying looks like this from the control plane: its node stops reporting.
    Killing the node's supervisor with SIGKILL takes its torchrun down with it and reports nothing.
    (One node, so that no peer notices the loss first through a broken collective.)"""
    spec = dict(SPEC, name="goes-silent", args=["--steps", "160", "--step-sleep", "0.05"],
                resources={"nodes": 1, "procs_per_node": 1},
                fault_tolerance={"max_restarts": 1, "heartbeat_timeout": 4})
    job = pg_stack.submit(spec)
    pg_stack.wait_checkpoint(job["id"])
    run_dir = f"job-{job['id']}/attempt-0/node-0"
    supervisors = [p for p in psutil.process_iter(["cmdline"])
                   if "torchyard.supervisor" in " ".join(p.info["cmdline"] or [])
                   and str(pg_stack.data_dir) in " ".join(p.info["cmdline"]) and run_dir in " ".join(p.info["cmdline"])]
    assert len(supervisors) == 1
    supervisors[0].kill()

    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
    assert final["status"] == "completed", final["status_reason"]
    assert final["attempt"] == 1 and final["restarts"] == 1
    recovering = [e for e in pg_stack.events(job["id"], "state") if e.get("status") == "recovering"][0]
    assert "lost: no heartbeat for 4s" in recovering["reason"]
    lost = [e for e in pg_stack.events(job["id"], "state") if e.get("scope") == "node" and e["status"] == "lost"]
    assert [(e["node_rank"], e["attempt"]) for e in lost] == [(0, 0)]
    assert pg_stack.wait_no_job_processes(job["id"]) == []

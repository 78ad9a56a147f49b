"""When a rank dies, Torchyard stops the rest and resumes the whole job from the last committed
checkpoint by itself, up to fault_tolerance.max_restarts times."""

from __future__ import annotations

import signal
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


def kill_a_rank_of_node(stack, job_id: int, node_rank: str, attempt: str, script: str = "mlp_ddp.py") -> None:
    victims = [
        p for p in stack.job_processes(job_id)
        if p.environ().get("TORCHYARD_NODE_RANK") == node_rank and p.environ().get("TORCHYARD_ATTEMPT") == attempt
        and script in " ".join(p.cmdline()) and "torch.distributed.run" not in " ".join(p.cmdline())
    ]
    assert victims, f"no training process of node {node_rank} attempt {attempt}:\n{stack.log_tail()}"
    victims[0].send_signal(signal.SIGKILL)


def wait_for_checkpoint(stack, job_id: int, timeout: float = 90) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        checkpoints = stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json()
        if checkpoints:
            return checkpoints[0]
        time.sleep(0.3)
    raise AssertionError(f"no checkpoint committed:\n{stack.log_tail()}")


# DDP's replicated checkpoints, and FSDP's sharded ones (torch.distributed.checkpoint, every rank's files).
@pytest.mark.parametrize("recipe", ["mlp_ddp.py", "mlp_fsdp.py"])
def test_a_killed_rank_is_recovered_from_the_last_checkpoint_and_the_job_completes(pg_stack, recipe):
    job = pg_stack.submit(dict(SPEC, entrypoint=f"examples/{recipe}", args=["--steps", "140", "--step-sleep", "0.05"]))
    checkpoint = wait_for_checkpoint(pg_stack, job["id"])
    kill_a_rank_of_node(pg_stack, job["id"], "1", "0", recipe)

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
    wait_for_checkpoint(pg_stack, job["id"])
    kill_a_rank_of_node(pg_stack, job["id"], "0", "0")
    deadline = time.monotonic() + 120
    while not any(e["attempt"] == 1 for e in pg_stack.events(job["id"], "metric")):
        assert time.monotonic() < deadline, f"attempt 1 never trained:\n{pg_stack.log_tail()}"
        time.sleep(0.5)
    kill_a_rank_of_node(pg_stack, job["id"], "0", "1")
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
    wait_for_checkpoint(pg_stack, job["id"])
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

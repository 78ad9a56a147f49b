"""Lossless preemption on the real stack (two local agents, real torchrun ranks): a high-priority job
submitted onto a cluster full of a low-priority one preempts it; the low one's ranks hear the
request through the SDK, commit a checkpoint, yield, wait as `preempted`, and complete later from
that very checkpoint. A script that never asks the SDK is stopped after its (short) grace and
resumes from its last committed checkpoint. Neither resumption counts a restart."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from torchyard.bundles import pack_directory

WHOLE_CLUSTER = {"nodes": 2, "procs_per_node": 2}
HALF = {"nodes": 1, "procs_per_node": 2}
# A script that checkpoints with the SDK but never asks it about preemption.
IGNORER = '''
import sys, time
import torch
from torchyard import sdk

steps, every = int(sys.argv[1]), int(sys.argv[2])
sdk.init_process_group()
start = 0
resumed = sdk.checkpoint.load_latest()
if resumed is not None:
    _state, start, _manifest = resumed
    print(f"rank {sdk.rank()}: resumed from checkpoint at step {start}", flush=True)
sdk.set_total_steps(steps)
for step in range(start + 1, steps + 1):
    time.sleep(0.1)
    sdk.report(step=step, loss=1.0 / step)
    if step % every == 0:
        sdk.checkpoint.save({"w": torch.full((1,), float(step))}, step)
sdk.shutdown_process_group()
'''


def recipe(name: str, steps: int, resources: dict, **extra) -> dict:
    return {"name": name, "entrypoint": "examples/mlp_ddp.py", "resources": resources,
            "args": ["--steps", str(steps), "--step-sleep", "0.05"], "fault_tolerance": {"max_restarts": 0},
            "checkpointing": {"every_n_steps": 40, "keep": 20}, **extra}


def checkpoints(stack, job_id: int) -> list[dict]:
    return stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json()


def resumed_at(stack, job_id: int, attempt: int) -> set[int]:
    found = set()
    for event in stack.logs(job_id):
        match = re.search(r"resumed from checkpoint at step (\d+)", event["line"])
        if match and event["attempt"] == attempt:
            found.add(int(match.group(1)))
    return found


def wait_step(stack, job_id: int, step: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while ((stack.job(job_id).get("progress") or {}).get("step") or 0) < step:
        assert time.monotonic() < deadline, stack.job_log_tail(job_id)
        time.sleep(0.3)


def job_events(stack, job_id: int) -> list[str]:
    return [e.get("reason") or "" for e in stack.events(job_id, "state") if e.get("scope") == "job"]


@pytest.mark.timeout(600)
def test_a_high_priority_job_preempts_a_low_one_that_checkpoints_yields_and_resumes_losing_nothing(pg_stack):
    # 200 steps of 0.05 s: the preemption lands near step 50, the resumed attempt still has steps to go.
    low = pg_stack.submit(recipe("low", 200, WHOLE_CLUSTER, priority="low"))["id"]
    pg_stack.wait_job(low, {"running"}, timeout=120)
    wait_step(pg_stack, low, 50)  # one periodic checkpoint committed (step 40)
    high = pg_stack.submit(recipe("high", 30, HALF, priority="high"))["id"]
    pg_stack.wait_job(low, {"preempting", "preempted"}, timeout=60)
    pg_stack.wait_job(high, {"running", "completed"}, timeout=120)
    # How soon the high job gets its machines is `make bench BENCH=scheduler`'s (preemption row).

    victim = pg_stack.job(low)
    assert victim["status"] == "preempted" and victim["restarts"] == 0, victim["status_reason"]
    reasons = job_events(pg_stack, low)
    assert any(r.startswith(f"preempted by #{high} (priority 10 (high)) of project default: needs") for r in reasons)
    assert any(r.startswith("yielded after committing a checkpoint") for r in reasons), reasons
    assert any(f"preempting #{low}" in r for r in job_events(pg_stack, high))
    yielded_step = max(c["step"] for c in checkpoints(pg_stack, low) if c["attempt"] == 0)
    assert yielded_step % 40, "the yield saved at once, not at the next periodic checkpoint"

    assert pg_stack.wait_job(high, {"completed", "failed", "stopped"}, timeout=120)["status"] == "completed"
    final = pg_stack.wait_job(low, {"completed", "failed", "stopped"}, timeout=240)
    assert final["status"] == "completed", pg_stack.job_log_tail(low)
    assert (final["attempt"], final["restarts"]) == (1, 0)
    # No committed step lost: the new attempt went on from the checkpoint the yield committed.
    assert resumed_at(pg_stack, low, 1) == {yielded_step}
    steps = [e["step"] for e in pg_stack.events(low, "metric") if e.get("attempt") == 1]
    assert steps and min(steps) > yielded_step


@pytest.mark.timeout(600)
def test_a_job_that_ignores_the_request_is_stopped_after_its_grace_and_resumes_from_its_checkpoint(
        pg_stack, tmp_path: Path):
    (tmp_path / "code").mkdir()
    (tmp_path / "code" / "ignore.py").write_text(IGNORER)
    packed = pack_directory(tmp_path / "code", tmp_path / "bundle.tar.zst")
    with open(packed.path, "rb") as body:
        put = pg_stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                           headers={"Content-Type": "application/octet-stream"})
    assert put.status_code in (200, 201), put.text
    ignorer = pg_stack.submit({
        "name": "ignorer", "entrypoint": "ignore.py", "code": {"bundle": packed.sha256}, "resources": WHOLE_CLUSTER,
        "args": ["200", "10"], "priority": "low", "preemption": {"grace": 3}, "fault_tolerance": {"max_restarts": 0},
        "checkpointing": {"keep": 50}})["id"]
    pg_stack.wait_job(ignorer, {"running"}, timeout=120)
    wait_step(pg_stack, ignorer, 25)
    high = pg_stack.submit(recipe("high-2", 20, HALF, priority="high"))["id"]
    preempted = pg_stack.wait_job(ignorer, {"preempted"}, timeout=60)
    assert preempted["restarts"] == 0
    # The transition's own reason (the job's status_reason is the queue's once a pass has run).
    states = pg_stack.events(ignorer, "state")
    went = [e["reason"] for e in states if e.get("scope") == "job" and e["status"] == "preempted"]
    assert went and went[0].startswith("stopped (0 of 2 nodes yielded)"), went
    reasons = [e.get("reason") or "" for e in states]
    assert any("stopped for preemption: did not yield within 3 s" in r for r in reasons), reasons
    last = max(c["step"] for c in checkpoints(pg_stack, ignorer) if c["attempt"] == 0)

    assert pg_stack.wait_job(high, {"completed", "failed", "stopped"}, timeout=120)["status"] == "completed"
    final = pg_stack.wait_job(ignorer, {"completed", "failed", "stopped"}, timeout=240)
    assert final["status"] == "completed", pg_stack.job_log_tail(ignorer)
    assert (final["attempt"], final["restarts"]) == (1, 0)
    assert resumed_at(pg_stack, ignorer, 1) == {last}

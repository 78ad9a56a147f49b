"""An elastic job (resources.nodes "2:3") on three local agents: one node's machine goes away for
good mid-run, and the job goes on at once on the two machines left, from its last checkpoint, with
the global batch and the global sample position unchanged, and completes."""

from __future__ import annotations

import re
import time

import psutil
import pytest

from .stack import start_pg_stack, stop_pg_stack

STEPS = 120


@pytest.fixture(scope="module")
def three_agents(tmp_path_factory):
    """The pg_stack fixture's stack with three local agents (its own: the shared one has two)."""
    stack = start_pg_stack(tmp_path_factory.mktemp("elastic-stack"), agents=3)
    try:
        yield stack
    finally:
        stop_pg_stack(stack)


def test_a_lost_machine_shrinks_the_job_which_resumes_at_the_same_global_sample(three_agents):
    stack = three_agents
    job = stack.submit({
        "name": "elastic", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", str(STEPS), "--step-sleep", "0.05"],
        "resources": {"nodes": "2:3", "procs_per_node": 1},
        "hyperparameters": {"batch_size": 12}, "scaling": {"mode": "keep_global_batch"},
        "checkpointing": {"enabled": True, "every_n_steps": 10, "keep": 2},
        "fault_tolerance": {"max_restarts": 2, "heartbeat_timeout": 4},
    })
    assert job["spec"]["resources"]["nodes"] == 3 and job["spec"]["resources"]["min_nodes"] == 2
    stack.wait_checkpoint(job["id"])
    detail = stack.job(job["id"])
    assert detail["world_size"] == 3 and detail["plan"]["nodes_range"] == [2, 3]
    victim = next(n for n in detail["nodes"] if n["attempt"] == 0 and n["node_rank"] == 2)
    machine = victim["machine"]
    # The machine is going away: drained (nothing new goes there), then its node dies without a word
    # (its supervisor killed takes its torchrun with it) and is declared lost.
    assert stack.api("PATCH", f"/api/machines/{machine['id']}", json={"status": "draining"}).status_code == 200
    run_dir = f"job-{job['id']}/attempt-0/node-2"
    supervisors = [p for p in psutil.process_iter(["cmdline"])
                   if "torchyard.supervisor" in " ".join(p.info["cmdline"] or [])
                   and str(stack.data_dir) in " ".join(p.info["cmdline"]) and run_dir in " ".join(p.info["cmdline"])]
    assert len(supervisors) == 1
    supervisors[0].kill()

    final = stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=240)
    assert final["status"] == "completed", f"{final['status_reason']}\n{stack.job_log_tail(job['id'])}"
    assert final["world_size"] == 2 and final["plan"]["nnodes"] == 2
    assert machine["name"] not in [n["machine"]["name"] for n in final["nodes"] if n["attempt"] == final["attempt"]]
    dispatches = [e["reason"] for e in stack.events(job["id"], "state")
                  if e.get("scope") == "job" and e["status"] == "dispatching"]
    # Its agent is still there (it answered the stop): drained rather than lost, as the event says.
    assert any(r.startswith(f"shrunk from 3 to 2 nodes: machine {machine['name']} draining; launching 2 node(s), "
                            "world size 2, attempt 1, resuming from ") for r in dispatches), dispatches

    logs = stack.logs(job["id"])
    first = [e["line"] for e in logs if e["attempt"] == 0 and "batch 4 per rank (global 12)" in e["line"]]
    assert len(first) == 3
    last = [e for e in logs if e["attempt"] == final["attempt"] and "from global sample" in e["line"]]
    assert {e["rank"] for e in last} == {0, 1}
    resumed = [int(re.search(r"at step (\d+)", e["line"]).group(1)) for e in logs
               if e["attempt"] == final["attempt"] and "resumed from checkpoint at step" in e["line"]]
    assert len(set(resumed)) == 1 and resumed[0] >= 10
    # The same global batch of 12 on 2 ranks, continuing at the sample the checkpoint recorded.
    for event in last:
        assert "batch 6 per rank (global 12)" in event["line"]
        assert event["line"].endswith(f"from global sample {resumed[0] * 12}")
    steps = [e["step"] for e in stack.events(job["id"], "metric") if e["attempt"] == final["attempt"]]
    assert min(steps) > resumed[0] and max(steps) == STEPS
    assert stack.wait_no_job_processes(job["id"]) == []
    stack.api("PATCH", f"/api/machines/{machine['id']}", json={"status": "online"})


def test_a_job_below_its_most_grows_back_at_a_checkpoint_when_a_machine_returns(three_agents):
    stack = three_agents
    machines = {m["name"]: m for m in stack.api("GET", "/api/machines").json()}
    away = machines["local-2"]
    assert stack.api("PATCH", f"/api/machines/{away['id']}", json={"status": "draining"}).status_code == 200
    try:
        job = stack.submit({
            "name": "grows", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", str(STEPS), "--step-sleep", "0.05"],
            "resources": {"nodes": "2:3", "procs_per_node": 1},
            "hyperparameters": {"batch_size": 12}, "scaling": {"mode": "keep_global_batch"},
            "checkpointing": {"enabled": True, "every_n_steps": 10, "keep": 2},
            "elastic": {"min_interval": 2},
        })
        stack.wait_checkpoint(job["id"])
        assert stack.job(job["id"])["world_size"] == 2
    finally:
        stack.api("PATCH", f"/api/machines/{away['id']}", json={"status": "online"})

    final = stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=240)
    assert final["status"] == "completed", f"{final['status_reason']}\n{stack.job_log_tail(job['id'])}"
    assert final["world_size"] == 3 and final["attempt"] == 1 and final["restarts"] == 0
    states = [e for e in stack.events(job["id"], "state") if e.get("scope") == "job"]
    assert any(e["status"] == "recovering" and e["reason"].startswith("growing from 2 to 3 nodes") for e in states)
    assert any(e["status"] == "dispatching" and e["reason"].startswith("grown from 2 to 3 nodes; launching 3 node(s)")
               for e in states)
    logs = stack.logs(job["id"])
    resumed = {int(re.search(r"at step (\d+)", e["line"]).group(1)) for e in logs
               if e["attempt"] == 1 and "resumed from checkpoint at step" in e["line"]}
    (step,) = resumed
    started = [e["line"] for e in logs if e["attempt"] == 1 and "from global sample" in e["line"]]
    assert len(started) == 3
    assert all("batch 4 per rank (global 12)" in line and line.endswith(f"from global sample {step * 12}")
               for line in started)
    assert stack.wait_no_job_processes(job["id"]) == []


def test_an_elastic_job_short_of_its_least_machines_waits_queued_then_starts_when_one_joins(three_agents):
    stack = three_agents
    machines = {m["name"]: m for m in stack.api("GET", "/api/machines").json()}
    away = [machines["local-1"], machines["local-2"]]
    for machine in away:
        assert stack.api("PATCH", f"/api/machines/{machine['id']}", json={"status": "draining"}).status_code == 200
    try:
        job = stack.submit({
            "name": "waits", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "30", "--step-sleep", "0.02"],
            "resources": {"nodes": "2:3", "procs_per_node": 1},
            "hyperparameters": {"batch_size": 12}, "scaling": {"mode": "keep_global_batch"},
        })
        # The scheduler retries a queued job now and then (queued -> planning -> queued): it never
        # gets further, and says why while it waits.
        deadline = time.monotonic() + 30
        while not ((queued := stack.job(job["id"]))["status"] == "queued" and "at least 2" in queued["status_reason"]):
            assert queued["status"] in ("queued", "planning") and time.monotonic() < deadline, queued
            time.sleep(0.3)
    finally:
        # A machine joins again: the queued job starts on the two there are.
        stack.api("PATCH", f"/api/machines/{away[0]['id']}", json={"status": "online"})
    try:
        final = stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=180)
        assert final["status"] == "completed", f"{final['status_reason']}\n{stack.job_log_tail(job['id'])}"
        assert final["world_size"] == 2 and final["attempt"] == 0
    finally:
        stack.api("PATCH", f"/api/machines/{away[1]['id']}", json={"status": "online"})

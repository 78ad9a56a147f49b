"""A machine joins the way the README says (`torchyard agent --server URL --token T`), goes offline
when its agent dies, and the CLI submits and follows a job with readable errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def wait_machine(stack, machine_id: int, status: str, timeout: float) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        machine = stack.api("GET", f"/api/machines/{machine_id}").json()
        if machine["status"] == status:
            return machine
        assert time.monotonic() < deadline, f"machine is {machine['status']}, wanted {status}"
        time.sleep(0.5)


def test_a_machine_joins_with_its_token_and_goes_offline_when_its_agent_dies(pg_stack, tmp_path):
    created = pg_stack.api("POST", "/api/machines", json={"name": "joiner", "host": "127.0.0.1"}).json()
    assert created["status"] == "pending"
    bad = subprocess.run([str(BIN / "torchyard"), "agent", "--server", pg_stack.base, "--token", "9999.not-a-real-secret-at-all"],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "does not know this machine token" in bad.stderr

    agent = subprocess.Popen(
        [str(BIN / "torchyard"), "agent", "--server", pg_stack.base, "--token", created["token"],
         "--work-dir", str(tmp_path / "agent")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    try:
        online = wait_machine(pg_stack, created["id"], "online", timeout=60)
        assert online["capabilities"]["cpu_count"] == os.cpu_count()
        assert online["capabilities"]["memory"] > 0 and online["agent_version"]
    finally:
        agent.kill()
        agent.wait(timeout=30)
    # TORCHYARD_MACHINE_OFFLINE_AFTER is 15 s by default; the sweep runs every second in tests.
    wait_machine(pg_stack, created["id"], "offline", timeout=40)
    assert pg_stack.api("DELETE", f"/api/machines/{created['id']}").status_code == 204


def run_cli(stack, *args: str, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    return subprocess.run([str(BIN / "torchyard"), *args], capture_output=True, text=True, timeout=timeout, env=env)


def test_the_cli_submits_and_follows_a_job_to_completion(pg_stack, tmp_path):
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"name": "from-the-cli", "entrypoint": "examples/mlp_ddp.py",
                                "args": ["--steps", "40"], "resources": {"nodes": 2, "procs_per_node": 1}}))
    result = run_cli(pg_stack, "submit", str(spec), "--follow")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "[rank 1] rank 1: done at step 40" in result.stdout
    assert "== job completed" in result.stdout
    listed = run_cli(pg_stack, "jobs")
    assert "from-the-cli" in listed.stdout and "completed" in listed.stdout
    job_id = listed.stdout.split()[0].lstrip("#")  # newest first
    # Checkpointing is on by default: the last step is committed.
    saved = run_cli(pg_stack, "checkpoints", job_id)
    assert saved.returncode == 0 and saved.stdout.startswith("step 40 ") and "world 2" in saved.stdout
    recipes = run_cli(pg_stack, "recipes")
    assert "examples/mlp_fsdp.py" in recipes.stdout and "FSDP2" in recipes.stdout


def test_the_cli_prints_field_errors_readably(pg_stack, tmp_path):
    spec = tmp_path / "bad.json"
    spec.write_text(json.dumps({"name": "bad", "entrypoint": "../../etc/passwd", "resources": {"nodes": 0}}))
    result = run_cli(pg_stack, "submit", str(spec))
    assert result.returncode == 2
    assert "HTTP 400" in result.stderr
    assert "entrypoint:" in result.stderr and "resources.nodes:" in result.stderr
    assert "Traceback" not in result.stderr
    missing = run_cli(pg_stack, "submit", str(tmp_path / "nope.json"))
    assert missing.returncode == 2 and "No such file" in missing.stderr


def test_torchyard_stacks_prints_where_every_rank_of_a_running_2x2_job_is(pg_stack):
    job = pg_stack.submit({"name": "where-is-everyone", "entrypoint": "examples/mlp_ddp.py",
                           "args": ["--steps", "100000", "--step-sleep", "0.05"],
                           "resources": {"nodes": 2, "procs_per_node": 2}, "checkpointing": {"enabled": False},
                           "fault_tolerance": {"max_restarts": 0}})
    try:
        def every_rank_trains() -> bool:
            return {e["rank"] for e in pg_stack.events(job["id"], "metric")} == {0, 1, 2, 3}

        assert pg_stack.watch_job(job["id"], every_rank_trains, timeout=120, on=frozenset({"state", "metric"})), \
            pg_stack.job_log_tail(job["id"])
        result = run_cli(pg_stack, "stacks", str(job["id"]), timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
        assert "4 rank(s) on 2 node(s)" in result.stdout, result.stdout
        for rank in range(4):
            assert f"== rank {rank} · node {rank // 2} on " in result.stdout, result.stdout
        # Each is the training script's own stack, read from outside while it runs.
        assert result.stdout.count(" (mlp_ddp.py:") >= 4, result.stdout
        answers = pg_stack.events(job["id"], "stacks")
        assert len(answers) == 2 and len({e["request"] for e in answers}) == 1, answers
        assert sorted(r["rank"] for e in answers for r in e["ranks"]) == [0, 1, 2, 3]
    finally:
        pg_stack.api("POST", f"/api/jobs/{job['id']}/stop")
    assert pg_stack.wait_job(job["id"], {"stopped", "failed", "completed"}, timeout=90)["status"] == "stopped"
    assert pg_stack.wait_no_job_processes(job["id"]) == []
    # A job with nothing running has no stacks to read: a readable error, not a wait.
    done = run_cli(pg_stack, "stacks", str(job["id"]))
    assert done.returncode == 2 and "no node of attempt 0 is running" in done.stderr, done.stderr

"""`torchyard validate` against `make run`'s stack (`torchyard-server run`: SQLite, its own Redis,
two local agents): every check passes there; a check that fails mid-job leaves no job running; and
with an agent stopped it fails, naming that agent's check and its cause. One stack for all three."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from .stack import unique_name

TORCHYARD = os.path.join(os.path.dirname(sys.executable), "torchyard")
EVERY_CHECK = ["server", "API token", "database", "redis", "storage", "controller", "ingest", "agent local-0",
               "agent local-1", "code bundle", "2-node job", "checkpoint", "kill and recovery"]


@pytest.fixture(scope="module")
def stack(embedded_stack):
    return embedded_stack  # the shared one (conftest.py)


def validate(stack, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token, COLUMNS="200")
    return subprocess.run([TORCHYARD, "validate", *args], capture_output=True, text=True, timeout=400, env=env)


def test_every_check_passes_on_a_make_run_stack_and_the_job_is_cleaned_up(stack):
    result = validate(stack, "--json")
    assert result.returncode == 0, result.stdout + result.stderr + stack.log_tail()
    report = json.loads(result.stdout)
    assert report["ok"] and report["first_failure"] is None
    assert [c["name"] for c in report["checks"]] == EVERY_CHECK
    assert {c["result"] for c in report["checks"]} == {"pass"}, report["checks"]
    details = {c["name"]: c["detail"] for c in report["checks"]}
    assert details["database"].startswith("sqlite:") and details["redis"].startswith("Redis ")
    assert "killed by SIGKILL" in details["kill and recovery"] and "completed step 120" in details["kill and recovery"]
    # The job really went through a restart from its checkpoint, and validate deleted it afterwards.
    assert stack.api("GET", f"/api/jobs/{report['job']}").status_code == 404
    assert stack.wait_no_job_processes(report["job"]) == []


def test_a_check_that_fails_mid_job_stops_the_job_and_keeps_it(stack):
    result = validate(stack, "--json", "--timeout", "2")
    assert result.returncode == 1, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert "within 2 s (--timeout)" in report["first_failure"]["cause"]
    assert report["job_kept"]
    job = stack.job(report["job"])
    assert job["status"] == "stopped", job["status_reason"]
    assert stack.wait_no_job_processes(report["job"]) == []


def test_with_an_agent_stopped_it_fails_naming_that_agent_and_why(stack, tmp_path):
    name = unique_name("extra")
    machine = stack.api("POST", "/api/machines", json={"name": name, "host": "127.0.0.1"}).json()
    agent = subprocess.Popen([TORCHYARD, "agent", "--server", stack.base, "--token", machine["token"],
                              "--work-dir", str(tmp_path / "agent")],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while stack.api("GET", f"/api/machines/{machine['id']}").json()["status"] != "online":
            assert agent.poll() is None and time.monotonic() < deadline, "the extra agent did not come online"
            time.sleep(0.5)
        jobs_before = len(stack.api("GET", "/api/jobs").json())
    finally:
        agent.terminate()  # the agent this test started, by its PID
        agent.wait(timeout=30)

    result = validate(stack)
    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    # Its heartbeat may still look fresh for a few seconds; the ping through the broker is not answered.
    assert f"FAILED: agent {name}: " in out and "no answer to a ping through the broker" in out, out
    rows = {line.split()[0] + " " + line.split()[1]: line for line in out.splitlines() if line.startswith("  agent ")}
    assert "PASS" in rows["agent local-0"] and "PASS" in rows["agent local-1"] and "FAIL" in rows[f"agent {name}"]
    assert out.count("SKIP") == 4 and f"an earlier check failed (agent {name})" in out
    assert len(stack.api("GET", "/api/jobs").json()) == jobs_before  # no job was started
    assert stack.api("DELETE", f"/api/machines/{machine['id']}").status_code == 204

"""`make run`'s stack exactly as it starts by default: SQLite under the data dir and a Redis that
Torchyard starts itself. A 1-node job runs through it, so the README's first command cannot rot."""

from __future__ import annotations

import os
import re
import time

import psutil
import pytest
import redis

from .stack import start_stack


@pytest.fixture(scope="module")
def embedded(embedded_stack):
    return embedded_stack  # the shared one (conftest.py)


def test_the_embedded_stack_uses_sqlite_and_its_own_redis_and_runs_a_job(embedded):
    log = embedded.log_path.read_text()
    assert "started Redis on redis://127.0.0.1:" in log
    assert "database: sqlite3" in log
    assert (embedded.data_dir / "torchyard.sqlite3").exists()
    machines = embedded.api("GET", "/api/machines").json()
    assert {m["name"]: m["status"] for m in machines} == {"local-0": "online", "local-1": "online"}
    assert all(m["capabilities"]["cpu_count"] >= 1 for m in machines)

    job = embedded.submit({
        "name": "one-node", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "40"],
        "resources": {"nodes": 1, "procs_per_node": 2},
    })
    final = embedded.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
    assert final["status"] == "completed", final["status_reason"]
    assert final["world_size"] == 2
    logs = embedded.logs(job["id"])
    assert {e["rank"] for e in logs if e["rank"] is not None} == {0, 1}
    checkpoints = embedded.api("GET", f"/api/jobs/{job['id']}/checkpoints").json()
    assert checkpoints and checkpoints[0]["uri"].startswith((embedded.data_dir / "checkpoints").as_uri())
    assert embedded.wait_no_job_processes(job["id"]) == []


def test_training_goes_on_when_an_agent_dies_and_the_stack_restarts_it(embedded):
    job = embedded.submit({
        "name": "agent-dies", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "250", "--step-sleep", "0.03"],
        "resources": {"nodes": 2, "procs_per_node": 1}, "fault_tolerance": {"max_restarts": 0},
    })
    deadline = time.monotonic() + 90
    while not embedded.events(job["id"], "metric"):
        assert time.monotonic() < deadline, embedded.log_tail()
        time.sleep(0.3)
    agents = [p for p in psutil.Process(embedded.process.pid).children(recursive=True)
              if "agent" in p.cmdline() and any(arg.endswith("/agents/local-1") for arg in p.cmdline())]
    assert len(agents) == 1
    agents[0].kill()

    final = embedded.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
    assert final["status"] == "completed", final["status_reason"]
    assert "local-1 exited with -9; starting it again" in embedded.log_path.read_text()
    machines = {m["name"]: m for m in embedded.api("GET", "/api/machines").json()}
    assert machines["local-1"]["status"] in ("online", "busy")  # busy while a last supervisor winds down


def test_the_dashboard_is_served_with_deep_links(embedded):
    for path in ("/", "/jobs/1", "/login"):
        # A browser's Accept: /jobs/1 is also the Rust coordinator's route, JSON for other clients (seed001/urls.py).
        response = embedded.session.get(embedded.base + path, timeout=10, headers={"Accept": "text/html,*/*;q=0.8"})
        assert response.status_code == 200, path
        assert '<div id="root">' in response.text


def test_stopping_the_stack_stops_training_and_the_next_start_resumes_it(tmp_path_factory):
    home = tmp_path_factory.mktemp("embedded-restart")
    stack = start_stack(home, env={}, agents=1)
    try:
        job = stack.submit({
            "name": "long", "entrypoint": "examples/mlp_ddp.py",
            "args": ["--steps", "300", "--step-sleep", "0.03"], "resources": {"nodes": 1, "procs_per_node": 1},
            "checkpointing": {"enabled": True, "every_n_steps": 25},
            "fault_tolerance": {"max_restarts": 0},
        })
        deadline = time.monotonic() + 90
        while not stack.api("GET", f"/api/jobs/{job['id']}/checkpoints").json():
            assert time.monotonic() < deadline, stack.log_tail()
            time.sleep(0.3)
    finally:
        stack.stop()
    assert stack.process.returncode == 0
    assert "interrupted job(s) 1" in stack.log_path.read_text()
    assert stack.wait_no_job_processes(job["id"], timeout=15) == []

    again = start_stack(home, env={}, agents=1)
    try:
        final = again.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
        assert final["status"] == "completed", final["status_reason"]
        assert final["attempt"] == 1 and final["restarts"] == 0
        logs = again.logs(job["id"])
        assert any(e["attempt"] == 1 and "resumed from checkpoint at step" in e["line"] for e in logs)
    finally:
        again.stop()


def test_a_controller_killed_with_9_is_restarted_and_leaves_no_second_beat(embedded):
    def children(word: str) -> list[psutil.Process]:
        return [p for p in psutil.Process(embedded.process.pid).children(recursive=True)
                if word in p.cmdline() and "celery" in " ".join(p.cmdline())]

    assert len(children("beat")) == 1 and len(children("worker")) == 1
    controller = children("worker")[0]
    group = os.getpgid(controller.pid)
    for process in [controller, *controller.children(recursive=True)]:
        process.kill()
    deadline = time.monotonic() + 30
    while "controller exited with -9; starting it again" not in embedded.log_path.read_text():
        assert time.monotonic() < deadline, embedded.log_tail()
        time.sleep(0.3)
    # Nothing of the killed worker's process group lives on, and still exactly one beat.
    assert not [p for p in psutil.process_iter() if _pgid(p) == group]
    assert len(children("beat")) == 1
    # The restarted controller works: a job is planned, launched and completes.
    job = embedded.submit({"name": "after-restart", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "5"],
                           "resources": {"nodes": 1, "procs_per_node": 1}})
    assert embedded.wait_job(job["id"], {"completed", "failed"}, timeout=120)["status"] == "completed"


def _pgid(process: psutil.Process) -> int | None:
    try:
        return os.getpgid(process.pid)
    except (ProcessLookupError, psutil.Error):
        return None


def embedded_redis(stack) -> redis.Redis:
    """The stack's own Redis as its default user: the password is in the data dir, 0600."""
    port = re.search(r"started Redis on redis://127\.0\.0\.1:(\d+)/0", stack.log_path.read_text()).group(1)
    conf = stack.data_dir / "redis" / "redis.conf"
    assert conf.stat().st_mode & 0o777 == 0o600
    password = re.search(r'requirepass "([^"]+)"', conf.read_text()).group(1)
    return redis.Redis(port=int(port), password=password, decode_responses=True)


# Last of the module: it removes a machine of the shared stack.
def test_agents_use_redis_users_of_their_own_that_follow_their_tokens(embedded):
    admin = embedded_redis(embedded)
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(port=admin.connection_pool.connection_kwargs["port"]).ping()
    ids = {m["name"]: m["id"] for m in embedded.api("GET", "/api/machines").json()}
    job = embedded.submit({"name": "acl", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "20"],
                           "resources": {"nodes": 2, "procs_per_node": 1}})
    assert embedded.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)["status"] == "completed"
    assert embedded.api("POST", f"/api/network/machines/{ids['local-0']}/ping").json()["reachable"] is True
    assert {f"agent-{i}" for i in ids.values()} <= {c["user"] for c in admin.client_list()}
    # Launches, events, heartbeats, pings and stops went through: Redis refused the agents nothing.
    assert admin.acl_log() == [], [(e["username"], e["object"], e["client-info"].get("cmd")) for e in admin.acl_log()]

    user = f"agent-{ids['local-0']}"
    before = admin.acl_getuser(user)["passwords"]
    assert embedded.api("POST", f"/api/machines/{ids['local-0']}/rotate-token").status_code == 200
    assert admin.acl_getuser(user)["passwords"] not in ([], before)

    gone = f"agent-{ids['local-1']}"
    assert embedded.api("DELETE", f"/api/machines/{ids['local-1']}").status_code == 204
    deadline = time.monotonic() + 60
    # Its agent stops (and is not started again), and its Redis user goes.
    while gone in admin.acl_users() or "local-1 stopped: its machine was removed" not in embedded.log_path.read_text():
        assert time.monotonic() < deadline, embedded.log_tail()
        time.sleep(0.5)
    assert f"agent of machine {ids['local-1']} stopped" in embedded.log_path.read_text()

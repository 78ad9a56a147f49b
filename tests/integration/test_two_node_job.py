"""A 2 x 2 job through the HTTP API on the real stack: PostgreSQL, Redis, Celery, Channels,
daphne, two agents as separate processes, real torchrun over gloo."""

from __future__ import annotations

import json
import signal
import time
import uuid

import pytest
from websockets.sync.client import connect

from .netns import free_subnet, ip, netns_unavailable
from .stack import FINAL_STATUSES

SPEC = {
    "name": "mnist-ddp-demo",
    "entrypoint": "examples/mlp_ddp.py",
    "resources": {"nodes": 2, "procs_per_node": 2},
    "fault_tolerance": {"max_restarts": 0},
}


def read_stream_until(ws, done, timeout: float = 150.0) -> list[dict]:
    """Every event the stream delivers until `done(events)` holds."""
    events: list[dict] = []
    deadline = time.monotonic() + timeout
    while not done(events):
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"stream timed out; got {len(events)} events, last: {events[-5:]}"
        message = json.loads(ws.recv(timeout=remaining))
        if message["type"] == "events":
            events.extend(message["events"])
    return events


def job_states(events: list[dict]) -> list[str]:
    return [e["status"] for e in events if e["type"] == "state" and e.get("scope") == "job"]


def test_a_two_by_two_job_trains_to_completion_and_streams_everything(pg_stack):
    job = pg_stack.submit(dict(SPEC, args=["--steps", "150"]))
    headers = {"Authorization": f"Token {pg_stack.token}"}
    with connect(pg_stack.ws_url(f"/api/jobs/{job['id']}/stream?after=0"), additional_headers=headers) as ws:
        events = read_stream_until(ws, lambda evs: job_states(evs)[-1:] in (["completed"], ["failed"]))

    assert job_states(events) == ["queued", "planning", "dispatching", "running", "completed"]
    log_ranks = {e["rank"] for e in events if e["type"] == "log" and e["rank"] is not None}
    assert log_ranks == {0, 1, 2, 3}
    ids = [e["id"] for e in events]
    assert ids == sorted(ids) and len(ids) == len(set(ids)), "stream ids must increase with no duplicate"
    for rank in range(4):
        steps = [e["step"] for e in events if e["type"] == "metric" and e["rank"] == rank]
        assert steps, f"no metric from rank {rank}"
        assert steps == sorted(steps) and steps[-1] == 150
    metric = next(e for e in events if e["type"] == "metric")
    assert {"loss", "throughput"} <= set(metric)

    final = pg_stack.job(job["id"])
    assert final["status"] == "completed"
    assert final["world_size"] == 4
    assert len(final["nodes"]) == 2
    assert {n["machine"]["name"] for n in final["nodes"]} == {"local-0", "local-1"}
    assert [(n["rank_start"], n["rank_end"]) for n in final["nodes"]] == [(0, 1), (2, 3)]
    assert all(n["status"] == "completed" and n["exit_code"] == 0 for n in final["nodes"])
    assert final["master_addr"] == final["nodes"][0]["machine"]["host"]
    assert 29500 <= final["master_port"] <= 29999
    assert final["progress"]["step"] == 150
    by_rank = final["progress"]["throughput_by_rank"]
    assert set(by_rank) == {"0", "1", "2", "3"}
    assert final["progress"]["throughput"] == pytest.approx(sum(by_rank.values()))
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_a_resumed_stream_replays_after_the_cursor_without_gaps_or_duplicates(pg_stack):
    job = pg_stack.submit(dict(SPEC, args=["--steps", "60"], resources={"nodes": 2, "procs_per_node": 1}))
    pg_stack.wait_job(job["id"], {"completed", "failed"})
    everything = pg_stack.events(job["id"])
    cut = everything[len(everything) // 2]["id"]
    headers = {"Authorization": f"Token {pg_stack.token}"}
    with connect(pg_stack.ws_url(f"/api/jobs/{job['id']}/stream?after={cut}"), additional_headers=headers) as ws:
        tail = read_stream_until(ws, lambda evs: evs and evs[-1]["id"] == everything[-1]["id"], timeout=30)
    assert [e["id"] for e in tail] == [e["id"] for e in everything if e["id"] > cut]


def test_a_killed_rank_fails_the_job_naming_the_node_and_stops_the_other_node(pg_stack):
    job = pg_stack.submit(dict(SPEC, name="kill-one-rank", args=["--steps", "100000", "--step-sleep", "0.02"]))
    deadline = time.monotonic() + 90
    while not any(e["type"] == "metric" for e in pg_stack.events(job["id"], "metric")):
        assert time.monotonic() < deadline, pg_stack.log_tail()
        time.sleep(0.5)
    victims = [
        p for p in pg_stack.job_processes(job["id"])
        if p.environ().get("TORCHYARD_NODE_RANK") == "1" and "mlp_ddp.py" in " ".join(p.cmdline())
        and "torch.distributed.run" not in " ".join(p.cmdline())
    ]
    assert victims, "no training process of node 1 found"
    victims[0].send_signal(signal.SIGKILL)

    final = pg_stack.wait_job(job["id"], {"failed", "completed", "stopped"}, timeout=60)
    assert final["status"] == "failed"
    assert "node 1 (local-1)" in final["status_reason"]
    assert "SIGKILL" in final["status_reason"] or "exit" in final["status_reason"]
    assert pg_stack.wait_no_job_processes(job["id"], timeout=30) == []
    nodes = {n["node_rank"]: n for n in pg_stack.wait_job(job["id"], {"failed"})["nodes"]}
    assert nodes[1]["status"] == "failed"


def test_stop_ends_every_node_and_the_job_is_stopped(pg_stack):
    job = pg_stack.submit(dict(SPEC, name="stop-me", args=["--steps", "100000", "--step-sleep", "0.02"]))
    pg_stack.wait_job(job["id"], {"running"}, timeout=90)
    response = pg_stack.api("POST", f"/api/jobs/{job['id']}/stop")
    assert response.status_code == 202
    assert response.json()["status"] in ("stopping", "stopped")
    final = pg_stack.wait_job(job["id"], {"stopped", "failed", "completed"}, timeout=60)
    assert final["status"] == "stopped"
    assert {n["status"] for n in final["nodes"]} == {"stopped"}
    states = [e["status"] for e in pg_stack.events(job["id"], "state") if e.get("scope") == "job"]
    assert states[-2:] == ["stopping", "stopped"]
    assert pg_stack.wait_no_job_processes(job["id"]) == []


def test_ping_reaches_the_agents_themselves(pg_stack):
    machines = pg_stack.api("GET", "/api/machines").json()
    for machine in machines:
        reply = pg_stack.api("POST", f"/api/network/machines/{machine['id']}/ping").json()
        assert reply["reachable"] is True, reply
    health = pg_stack.api("POST", "/api/network/health-check").json()
    assert health["healthy"] == health["total"] == 2


def agent_credentials(stack, machine_name: str) -> tuple[str, str]:
    """The machine token and Redis URL an agent of the stack runs with, from its environment."""
    import psutil

    for proc in psutil.Process(stack.process.pid).children():
        argv = proc.cmdline()
        if "agent" in argv and any(a.endswith(f"/agents/{machine_name}") for a in argv):
            environ = proc.environ()
            return environ["TORCHYARD_MACHINE_TOKEN"], environ["TORCHYARD_REDIS_URL"]
    raise LookupError(f"no agent of {machine_name}")


def test_an_agent_forging_events_for_another_machines_node_is_dropped_and_logged(pg_stack):
    import redis
    from torchyard import protocol

    job = pg_stack.submit(dict(SPEC, name="forged", args=["--steps", "80", "--step-sleep", "0.05"],
                               resources={"nodes": 2, "procs_per_node": 1}))
    running = pg_stack.wait_job(job["id"], {"running"}, timeout=90)
    victim = next(n for n in running["nodes"] if n["machine"]["name"] == "local-1")
    token, redis_url = agent_credentials(pg_stack, "local-0")
    forger_id, _ = protocol.parse_machine_token(token)
    # Asking the server as that agent would: its own Redis URL (and credentials, where Redis has them).
    config = pg_stack.session.get(pg_stack.base + "/api/agent/config",
                                  headers={"Authorization": f"Machine {token}"}).json()
    assert config["machine"]["id"] == forger_id
    client = redis.Redis.from_url(config.get("redis_url") or redis_url)
    envelope = {"job": job["id"], "attempt": victim["attempt"], "node": victim["id"], "node_rank": victim["node_rank"],
                "rank": victim["rank_start"], "ts": time.time()}
    stream = protocol.machine_event_stream(forger_id)
    client.xadd(stream, protocol.encode_event({**envelope, "type": "state", "seq": 900_001,
                                               "status": "failed", "exit_code": 1, "reason": "forged"}))
    client.xadd(stream, protocol.encode_event({**envelope, "type": "metric", "seq": 900_002, "step": 999_999,
                                               "loss": 0.0}))
    client.close()

    final = pg_stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
    assert final["status"] == "completed", final["status_reason"]
    assert final["restarts"] == 0 and final["progress"]["step"] == 80
    assert all(n["status"] == "completed" for n in final["nodes"])
    events = pg_stack.events(job["id"])
    assert not [e for e in events if e.get("reason") == "forged" or e.get("step") == 999_999]
    deadline = time.monotonic() + 10
    expected = f"from machine {forger_id}'s stream claiming node {victim['id']} of job {job['id']}"
    while expected not in pg_stack.log_tail(100_000):
        assert time.monotonic() < deadline, "the dropped events were not logged"
        time.sleep(0.5)


def test_a_job_on_agents_of_one_host_pins_nothing_and_outlives_an_interface_another_program_removes(pg_stack):
    # Two agents side by side share one network stack: their ranks' bytes never leave the machine.
    # An interface of the host that another program owns (here a bridge, as a container runtime or a
    # VPN makes, measured faster by noise) must not carry the job: removing it mid-run once left
    # every rank waiting in a collective for good.
    if why := netns_unavailable():
        pytest.skip(why)
    bridge, subnet = f"tyx{uuid.uuid4().hex[:8]}", free_subnet()
    ip("link", "add", bridge, "type", "bridge")
    try:
        ip("addr", "add", f"{subnet}.1/24", "dev", bridge)
        ip("link", "set", bridge, "up")
        job = pg_stack.submit(dict(SPEC, name="one-host", args=["--steps", "120", "--step-sleep", "0.03"]))
        pg_stack.wait_job(job["id"], {"running"})
        assert pg_stack.watch_job(job["id"], lambda: (pg_stack.job(job["id"])["progress"].get("step") or 0) >= 10,
                                  120, on=frozenset({"state", "metric"}))
        ip("link", "del", bridge)
        done = pg_stack.wait_job(job["id"], FINAL_STATUSES, timeout=120)
    finally:
        ip("link", "del", bridge, check=False)
    assert done["status"] == "completed", done["status_reason"]
    assert not done["links"], done["links"]
    lines = [e["line"] for e in pg_stack.logs(job["id"])]
    assert any("shares this machine's network stack" in line and "nothing pinned" in line for line in lines), lines[:20]

"""A machine acts only as itself: ingest takes from a machine's own streams only that machine's
heartbeats and the events of nodes placed on it; a rotated or removed machine's token is refused."""

from __future__ import annotations

import logging

import pytest
import redis
from factories import bring_online, make_job, make_node
from rest_framework.test import APIClient
from torchyard import protocol
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines import services as machine_services
from torchyard_server.machines.models import Machine
from torchyard_server.machines.services import machine_authenticate, machine_record_heartbeat
from torchyard_server.streaming.ingest import Ingest
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db(transaction=True)


def _clear(client: redis.Redis) -> None:
    client.delete(protocol.EVENT_STREAM, protocol.LIVENESS_STREAM)
    for pattern in (f"{protocol.EVENT_STREAM}:m*", f"{protocol.LIVENESS_STREAM}:m*"):
        for key in client.scan_iter(pattern):
            client.delete(key)


@pytest.fixture
def stream(redis_url):
    client = redis.Redis.from_url(redis_url)
    _clear(client)
    yield client
    _clear(client)


@pytest.fixture
def placed(db, owner):
    """A running 2-node job: node 0 on machine a, node 1 on machine b."""
    (a, token_a), (b, token_b) = bring_online("gpu-a"), bring_online("gpu-b")
    job = Job.objects.create(name="j", spec={"fault_tolerance": {"max_restarts": 0}}, owner=owner,
                             status=Job.Status.RUNNING, world_size=2)
    nodes = [make_node(job, node_rank=r, machine=m, status=JobNode.Status.RUNNING)
             for r, m in enumerate((a, b))]
    return {"job": job, "machines": (a, b), "tokens": (token_a, token_b), "nodes": nodes}


def node_event(node: JobNode, seq: int, **fields) -> dict:
    return {"type": protocol.LOG, "job": node.job_id, "attempt": node.attempt, "node": node.pk,
            "node_rank": node.node_rank, "rank": node.node_rank, "seq": seq, "ts": 1_700_000_000 + seq,
            "stream": "stdout", "line": f"line {seq}", **fields}


def drain(ingest: Ingest) -> None:
    while ingest.step():
        pass
    ingest.step()


def test_a_node_on_another_machine_cannot_be_reported_from_this_machines_stream(stream, redis_url, placed, caplog):
    job, (a, _), (node_a, node_b) = placed["job"], placed["machines"], placed["nodes"]
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    own = protocol.machine_event_stream(a.pk)
    stream.xadd(own, protocol.encode_event(node_event(node_a, 1)))
    # Machine a's agent forges node b's failure and a metric for it.
    stream.xadd(own, protocol.encode_event({**node_event(node_b, 1), "type": protocol.STATE,
                                            "status": protocol.NODE_FAILED, "exit_code": 1}))
    stream.xadd(own, protocol.encode_event({**node_event(node_b, 2), "type": protocol.METRIC, "step": 99}))
    # ... and an event that names no node at all.
    stream.xadd(own, protocol.encode_event({**node_event(node_a, 3), "node": None}))
    with caplog.at_level(logging.WARNING, logger="torchyard_server.streaming.ingest"):
        drain(ingest)

    assert [e.payload["line"] for e in JobEvent.objects.filter(job=job)] == ["line 1"]
    job.refresh_from_db()
    node_b.refresh_from_db()
    assert job.status == Job.Status.RUNNING and node_b.status == JobNode.Status.RUNNING
    assert job.progress.get("step") is None
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert any(f"machine {a.pk}'s stream" in w and f"node {node_b.pk} of job {job.pk}" in w for w in warnings), warnings
    assert stream.xlen(own) == 0  # dropped entries are acknowledged and deleted, not re-read


def test_a_node_may_not_claim_another_job_or_attempt_from_its_own_machine(stream, redis_url, placed, owner):
    (a, _), (node_a, _) = placed["machines"], placed["nodes"]
    other = make_job(name="other", owner=owner, status=Job.Status.RUNNING)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    own = protocol.machine_event_stream(a.pk)
    stream.xadd(own, protocol.encode_event(node_event(node_a, 1, job=other.pk)))
    stream.xadd(own, protocol.encode_event(node_event(node_a, 2, attempt=5)))
    drain(ingest)
    assert not JobEvent.objects.exists()


def test_heartbeats_count_only_for_the_streams_own_machine_and_nodes(stream, redis_url, placed):
    (a, b), (_, token_b), (node_a, node_b) = placed["machines"], placed["tokens"], placed["nodes"]
    Machine.objects.filter(pk=b.pk).update(status=Machine.Status.OFFLINE, last_heartbeat=None)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    beats = protocol.machine_liveness_stream(a.pk)
    # Even with machine b's token, a heartbeat for b on a's stream is not b's.
    stream.xadd(beats, protocol.encode_event({"type": protocol.MACHINE_HEARTBEAT, "machine": b.pk, "token": token_b}))
    stream.xadd(beats, protocol.encode_event({"type": protocol.HEARTBEAT, "job": node_b.job_id, "attempt": 0,
                                              "node": node_b.pk, "node_rank": 1, "ts": 1.0}))
    stream.xadd(beats, protocol.encode_event({"type": protocol.HEARTBEAT, "job": node_a.job_id, "attempt": 0,
                                              "node": node_a.pk, "node_rank": 0, "ts": 1.0}))
    drain(ingest)
    b.refresh_from_db()
    node_a.refresh_from_db()
    node_b.refresh_from_db()
    assert b.status == Machine.Status.OFFLINE and b.last_heartbeat is None
    assert node_b.last_heartbeat is None and node_a.last_heartbeat is not None


def test_a_machine_added_while_ingest_runs_is_read_without_a_restart(stream, redis_url, placed, owner):
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    ingest.step()
    c, token_c = bring_online("gpu-c")
    Machine.objects.filter(pk=c.pk).update(status=Machine.Status.PENDING, last_heartbeat=None)
    stream.xadd(protocol.machine_liveness_stream(c.pk), protocol.encode_event(
        {"type": protocol.MACHINE_HEARTBEAT, "machine": c.pk, "token": token_c}))
    ingest._last_discover = 0.0  # as DISCOVER_EVERY later
    drain(ingest)
    c.refresh_from_db()
    assert c.last_heartbeat is not None and c.status == Machine.Status.ONLINE


def test_a_removed_machine_is_told_to_stop_its_token_is_refused_and_its_stream_dropped(
        stream, redis_url, placed, staff_api, monkeypatch):
    (a, _), (token_a, _), (node_a, _) = placed["machines"], placed["tokens"], placed["nodes"]
    sent = []
    monkeypatch.setattr(machine_services.celery_app, "send_task", lambda name, **kw: sent.append((name, kw)))
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    stream.xadd(protocol.machine_event_stream(a.pk), protocol.encode_event(node_event(node_a, 1)))

    assert staff_api.delete(f"/api/machines/{a.pk}?force=true").status_code == 204
    assert (protocol.TASK_SHUTDOWN, protocol.machine_queue(a.pk)) in [(n, kw.get("queue")) for n, kw in sent]
    assert sent[-1][0] == protocol.TASK_SHUTDOWN  # after the stops of its nodes
    assert machine_authenticate(token=token_a) is None
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Machine {token_a}")
    assert agent.get("/api/agent/config").status_code == 401
    assert machine_record_heartbeat(event={"machine": a.pk, "token": token_a}) is None

    ingest._last_discover = 0.0
    drain(ingest)
    assert not JobEvent.objects.filter(payload__line="line 1").exists()
    assert not stream.exists(protocol.machine_event_stream(a.pk))


def test_rotating_a_token_refuses_the_old_one_at_once_and_keeps_the_machine(stream, placed, staff_api, teammate):
    (a, _), (token_a, _), (node_a, _) = placed["machines"], placed["tokens"], placed["nodes"]
    answer = staff_api.post(f"/api/machines/{a.pk}/rotate-token")
    assert answer.status_code == 200, answer.content
    new = answer.json()["token"]
    assert answer.json()["id"] == a.pk and new != token_a and new.startswith(f"{a.pk}.")

    assert machine_authenticate(token=token_a) is None
    assert machine_authenticate(token=new).pk == a.pk
    agent = APIClient()
    agent.credentials(HTTP_AUTHORIZATION=f"Machine {token_a}")
    assert agent.get("/api/agent/config").status_code == 401
    agent.credentials(HTTP_AUTHORIZATION=f"Machine {new}")
    assert agent.get("/api/agent/config").json()["machine"]["id"] == a.pk
    assert machine_record_heartbeat(event={"machine": a.pk, "token": token_a}) is None
    assert machine_record_heartbeat(event={"machine": a.pk, "token": new}).pk == a.pk
    # History stays: the machine's nodes still point at it.
    node_a.refresh_from_db()
    assert node_a.machine_id == a.pk and Machine.objects.filter(pk=a.pk).count() == 1


def test_only_staff_rotate_a_token(placed, teammate, anonymous):
    a = placed["machines"][0]
    client = APIClient()
    client.force_authenticate(teammate)
    assert client.post(f"/api/machines/{a.pk}/rotate-token").status_code == 403
    assert anonymous.post(f"/api/machines/{a.pk}/rotate-token").status_code == 401
    assert machine_authenticate(token=placed["tokens"][0]) is not None

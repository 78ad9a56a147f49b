"""The ingest loop against a real Redis stream and the test database: nothing is lost when the
controller dies between reading events and acknowledging them, and nothing is stored twice."""

import pytest
import redis
from factories import make_job, make_node
from torchyard import protocol
from torchyard_server.jobs.models import Job
from torchyard_server.streaming.ingest import CONSUMER, Ingest
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def stream(redis_url):
    client = redis.Redis.from_url(redis_url)
    client.delete(protocol.EVENT_STREAM)
    yield client
    client.delete(protocol.EVENT_STREAM)


def log_event(job_id: int, seq: int) -> dict:
    return {"type": protocol.LOG, "job": job_id, "attempt": 0, "node": None, "node_rank": 0, "rank": 0,
            "seq": seq, "key": f"k{seq}", "ts": 1_700_000_000 + seq, "stream": "stdout", "line": f"line {seq}"}


def test_events_read_but_not_acknowledged_before_a_crash_are_stored_once_after_restart(stream, redis_url, owner):
    job = make_job(name="j", owner=owner)
    first = Ingest(redis_url)
    first.ensure_group()
    for seq in range(1, 6):
        stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk, seq)))
    # A controller that read the batch and died before storing or acknowledging it:
    stream.xreadgroup(protocol.EVENT_GROUP, CONSUMER, {protocol.EVENT_STREAM: ">"}, count=100)
    assert stream.xpending(protocol.EVENT_STREAM, protocol.EVENT_GROUP)["pending"] == 5

    restarted = Ingest(redis_url)
    while restarted.step():
        pass
    restarted.step()  # past the backlog: new entries only
    assert [e.payload["line"] for e in JobEvent.objects.filter(job=job)] == [f"line {i}" for i in range(1, 6)]
    assert stream.xpending(protocol.EVENT_STREAM, protocol.EVENT_GROUP)["pending"] == 0

    # A producer that retried a send it thought had failed: the same events again are ignored.
    for seq in range(1, 6):
        stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk, seq)))
    restarted.step()
    assert JobEvent.objects.filter(job=job).count() == 5
    ids = list(JobEvent.objects.filter(job=job).values_list("id", flat=True))
    assert ids == sorted(ids)


def test_events_of_unknown_jobs_and_undecodable_entries_are_dropped_without_stopping(stream, redis_url, owner):
    job = make_job(name="j", owner=owner)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    stream.xadd(protocol.EVENT_STREAM, {"e": "{not json"})
    stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk + 1000, 1)))
    stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk, 2)))
    ingest.step()  # its own backlog: empty
    assert ingest.step() == 3
    assert [e.payload["line"] for e in JobEvent.objects.all()] == ["line 2"]


def test_an_error_while_applying_a_batch_stores_none_of_it_and_the_retry_applies_each_event_once(
        stream, redis_url, owner, monkeypatch):
    from torchyard_server.jobs.models import JobNode
    from torchyard_server.jobs.registries import event_appliers
    from torchyard_server.streaming import ingest as ingest_module

    job = Job.objects.create(name="j", spec={"fault_tolerance": {"max_restarts": 0}}, owner=owner,
                             status=Job.Status.RUNNING, world_size=1)
    node = make_node(job, machine_name="m", host="h", status=JobNode.Status.RUNNING)
    envelope = {"job": job.pk, "attempt": 0, "node": node.pk, "node_rank": 0}
    checkpoint = {**envelope, "type": protocol.CHECKPOINT, "seq": 1, "step": 50, "uri": "file:///x/step-00000050/manifest.json",
                  "manifest": {"step": 50, "files": []}}
    completed = {**envelope, "type": protocol.STATE, "seq": 2, "status": protocol.NODE_COMPLETED, "exit_code": 0}
    for event in (checkpoint, completed):
        stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(event))

    # A fault between storing the batch and applying it (here: the checkpoints app's applier raises once).
    applier = event_appliers.get(protocol.CHECKPOINT)
    real = applier.apply
    calls = []

    def fails_once(events):
        calls.append(events)
        if len(calls) == 1:
            raise RuntimeError("injected fault")
        return real(events)

    monkeypatch.setattr(applier, "apply", fails_once)
    monkeypatch.setattr(ingest_module.time, "sleep", lambda s: None)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    ingest._backlog = False
    assert ingest.step_or_retry() == 0
    assert not JobEvent.objects.filter(job=job).exists()  # nothing stored: nothing can be skipped later
    assert stream.xpending(protocol.EVENT_STREAM, protocol.EVENT_GROUP)["pending"] == 2

    while ingest.step_or_retry():
        pass
    job.refresh_from_db()
    assert job.status == Job.Status.COMPLETED  # the node's report was applied, not lost
    assert job.checkpoints.count() == 1 and len(calls) == 2
    assert JobEvent.objects.filter(job=job).count() == 2
    assert stream.xpending(protocol.EVENT_STREAM, protocol.EVENT_GROUP)["pending"] == 0
    ingest.step_or_retry()  # read again: nothing is applied twice
    assert len(calls) == 2 and JobEvent.objects.filter(job=job).count() == 2


def test_heartbeats_are_applied_ahead_of_a_backlog_of_log_lines(stream, redis_url, owner):
    from torchyard_server.jobs.models import JobNode

    stream.delete(protocol.LIVENESS_STREAM)
    job = make_job(name="j", owner=owner, status=Job.Status.RUNNING)
    node = make_node(job, machine_name="m", host="h", status=JobNode.Status.RUNNING)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    pipe = stream.pipeline(transaction=False)
    for seq in range(1, 20_001):  # ranks printing as fast as they can
        pipe.xadd(protocol.EVENT_STREAM, protocol.encode_event({**log_event(job.pk, seq), "node": node.pk}))
    pipe.execute()
    stream.xadd(protocol.LIVENESS_STREAM, protocol.encode_event(
        {"type": protocol.HEARTBEAT, "job": job.pk, "attempt": 0, "node": node.pk, "node_rank": 0, "ts": 1.0}))

    ingest.step()  # one batch of the backlog, and every heartbeat
    node.refresh_from_db()
    assert node.last_heartbeat is not None
    assert JobEvent.objects.filter(job=job).count() <= 1_000
    assert stream.xlen(protocol.LIVENESS_STREAM) == 0
    stream.delete(protocol.LIVENESS_STREAM)


def test_packed_entries_are_stored_event_by_event_once_and_sent_as_a_chain_of_frames(stream, redis_url, owner):
    import asyncio
    import json

    from channels.layers import get_channel_layer
    from torchyard_server.live import groups

    job = make_job(name="j", owner=owner)
    layer = get_channel_layer()
    loop = asyncio.new_event_loop()
    channel = loop.run_until_complete(layer.new_channel())
    loop.run_until_complete(layer.group_add(groups.job_group(job.pk), channel))
    try:
        ingest = Ingest(redis_url)
        ingest.ensure_group()
        ingest.step()  # its own backlog: empty
        lines = [log_event(job.pk, seq) for seq in range(1, 1501)]
        lines[7]["line"] = "a NUL \x00 that jsonb refuses"
        for _, fields in protocol.pack_events(lines[:1000]):
            stream.xadd(protocol.EVENT_STREAM, fields)
        while ingest.step():
            pass
        # A producer that retried: the last 200 of those again, packed with 500 new ones.
        for _, fields in protocol.pack_events(lines[800:]):
            stream.xadd(protocol.EVENT_STREAM, fields)
        while ingest.step():
            pass

        stored = list(JobEvent.objects.filter(job=job).order_by("id"))
        assert [e.payload["line"] for e in stored] == [e["line"].replace("\x00", "\ufffd") for e in lines]
        frames: list[dict] = []
        while sum(f["count"] for f in frames) < len(stored):
            message = loop.run_until_complete(asyncio.wait_for(layer.receive(channel), timeout=10))
            frames += [json.loads(f["text"]) for f in message.get("frames", [])]
        events = [e for f in frames for e in f["events"]]
        assert [e["id"] for e in events] == [e.pk for e in stored]
        assert events[8] == stored[8].as_message()
        # Each frame names the one before: a client that missed one can tell.
        assert [f["prev"] for f in frames] == [0] + [f["last"] for f in frames[:-1]]
    finally:
        loop.run_until_complete(layer.group_discard(groups.job_group(job.pk), channel))
        loop.close()

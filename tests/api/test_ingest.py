"""The ingest loop against a real Redis stream and the test database: nothing is lost when the
controller dies between reading events and acknowledging them, and nothing is stored twice."""

import pytest
import redis
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
    job = Job.objects.create(name="j", spec={}, owner=owner)
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
    job = Job.objects.create(name="j", spec={}, owner=owner)
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    stream.xadd(protocol.EVENT_STREAM, {"e": "{not json"})
    stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk + 1000, 1)))
    stream.xadd(protocol.EVENT_STREAM, protocol.encode_event(log_event(job.pk, 2)))
    ingest.step()  # its own backlog: empty
    assert ingest.step() == 3
    assert [e.payload["line"] for e in JobEvent.objects.all()] == ["line 2"]

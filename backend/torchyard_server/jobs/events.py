"""Controller-side producer: the controller's own events (job transitions) enter the same Redis
stream as the supervisors', so the ingest loop stays the single writer of JobEvent rows.

It knows no models, so it sits below every app: jobs publishes through it without importing
streaming, which sits above jobs. What it takes is the stream contract's events
(torchyard.stream_contract.JobEvent), so mypy holds every producer to their schema."""

from __future__ import annotations

import threading
import time
import uuid

import redis
from django.conf import settings
from django.db import transaction
from torchyard import protocol
from torchyard.stream_contract import JobEvent

_local = threading.local()


def redis_client() -> redis.Redis:
    client = getattr(_local, "client", None)
    if client is None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)
        _local.client = client
    return client


def publish_now(events: list[JobEvent]) -> None:
    pipe = redis_client().pipeline(transaction=False)
    for event in events:
        event.setdefault("ts", time.time())
        event.setdefault("key", uuid.uuid4().hex)
        pipe.xadd(
            protocol.EVENT_STREAM,
            protocol.encode_event(event),
            maxlen=protocol.EVENT_STREAM_MAXLEN,
            approximate=True,
        )
    pipe.execute()


def publish_on_commit(*events: JobEvent) -> None:
    """Publish once the surrounding transaction commits, so nobody sees a state the DB rolled back."""
    batch = [event.copy() for event in events]
    for event in batch:
        event["ts"], event["key"] = time.time(), uuid.uuid4().hex
    transaction.on_commit(lambda: publish_now(batch))

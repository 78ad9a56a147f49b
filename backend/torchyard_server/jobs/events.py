"""Controller-side producer: the controller's own events (job transitions) enter the same Redis
stream as the supervisors', so the ingest loop stays the single writer of JobEvent rows.

It knows no models, so it sits below every app: jobs publishes through it without importing
streaming, which sits above jobs."""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any

import redis
from django.conf import settings
from django.db import transaction
from torchyard import protocol

_local = threading.local()


def redis_client() -> redis.Redis:
    client = getattr(_local, "client", None)
    if client is None:
        client = redis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)
        _local.client = client
    return client


def publish_now(events: list[dict[str, Any]]) -> None:
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


def publish_on_commit(*events: dict[str, Any]) -> None:
    """Publish once the surrounding transaction commits, so nobody sees a state the DB rolled back."""
    batch = [dict(e, ts=time.time(), key=uuid.uuid4().hex) for e in events]
    transaction.on_commit(lambda: publish_now(batch))

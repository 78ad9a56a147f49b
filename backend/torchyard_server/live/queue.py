"""The queue on the cluster stream: after each queue pass (jobs/placement/queue.py, through
jobs.registries.queue_changed) the queue as it now stands goes to the cluster group, when it
differs from the last one sent and a dashboard listens. Each client's consumer keeps the latest and
sends it as one `queue` message (cluster.QueueUpdates), only its projects' jobs."""

from __future__ import annotations

import functools
import hashlib
import json
import logging

import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings

from ..jobs.registries import QueuedJob, QueueListener
from ..streaming import telemetry
from . import groups

log = logging.getLogger(__name__)
DIGEST_KEY = "torchyard:queue:digest"


@functools.cache
def _redis(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)


class QueueBroadcast(QueueListener):
    type = "live_queue"

    def queue_changed(self, entries: list[QueuedJob]) -> None:
        broadcast_queue(entries)


def broadcast_queue(entries: list[QueuedJob]) -> None:
    """Send the queue to the cluster group, unless it is the one sent last or nobody listens."""
    digest = hashlib.sha256(json.dumps(entries, sort_keys=True, default=str).encode()).hexdigest()
    try:
        client = _redis(settings.REDIS_URL)
        previous = client.getset(DIGEST_KEY, digest)
        if isinstance(previous, bytes) and previous.decode() == digest:
            return
        if not telemetry.websocket_clients(client)["cluster"]:
            return
    except redis.RedisError as exc:
        log.warning("queue broadcast: %s", exc)
        return
    async_to_sync(get_channel_layer().group_send)(groups.CLUSTER, {"type": "cluster.queue", "jobs": entries})

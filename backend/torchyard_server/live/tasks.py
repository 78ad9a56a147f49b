"""The cluster stream's machine table, sent by the controller (beat, every MACHINES_EVERY).

Not from the ingest loop: heartbeats must not wait for it. Skipped while no dashboard holds the
cluster stream open (the web processes report their clients, telemetry.py): a client gets the whole
table when it connects anyway. The table goes as the JSON text PostgreSQL writes
(machine_list_json), which the web processes send on as it is: a thousand machines as Python
objects cost every web process tens of milliseconds of its event loop to unpack, and each of its
clients as many again to write out, every MACHINES_EVERY.
"""

from __future__ import annotations

import logging

import redis
from asgiref.sync import async_to_sync
from celery import shared_task
from channels.layers import get_channel_layer
from django.conf import settings

from ..machines.selectors import machine_list_json
from ..streaming import telemetry
from . import groups

log = logging.getLogger(__name__)
# As often as heartbeats come: a browser redraws its machine table at most this often.
MACHINES_EVERY = 2.0


@shared_task(name="torchyard_server.live.tasks.broadcast_machines")
def broadcast_machines() -> bool:
    """Send every machine to the cluster group; returns whether it did (no listener: no send).
    Idempotent: a repeated send replaces the table with the same one."""
    try:
        listening = telemetry.websocket_clients(redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5))
    except redis.RedisError as exc:
        log.warning("machines broadcast: %s", exc)
        return False
    if not listening["cluster"]:
        return False
    async_to_sync(get_channel_layer().group_send)(groups.CLUSTER, {"type": "cluster.machines",
                                                                   "machines": machine_list_json()})
    return True

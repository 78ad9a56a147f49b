"""The queue, live on the cluster stream: after a queue pass the queue as it now stands goes to the
cluster group (live/queue.py) when it changed and a dashboard listens, and each client gets
only its projects' jobs, with their place in the whole queue."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from clients import token_for
from django.conf import settings
from torchyard_server.live import groups
from torchyard_server.live.queue import DIGEST_KEY, broadcast_queue
from torchyard_server.projects.models import Project
from torchyard_server.streaming import telemetry

pytestmark = pytest.mark.django_db(transaction=True)


def entry(job_id: int, project: str, position: int) -> dict:
    return {"id": job_id, "name": f"j{job_id}", "project": project, "position": position, "reason": "waiting"}


async def test_a_client_gets_the_queue_with_only_its_projects_jobs(teammate):
    from torchyard_server.asgi import application

    await sync_to_async(Project.objects.create)(name="secret")
    key = await sync_to_async(token_for)(teammate)
    client = WebsocketCommunicator(application, "/api/cluster/stream", headers=[(b"authorization", f"Token {key}".encode())])
    assert (await client.connect())[0]
    assert (await client.receive_json_from(timeout=10))["type"] == "machines"
    assert (await client.receive_json_from(timeout=10))["type"] == "jobs"
    layer = get_channel_layer()
    first = [entry(1, "default", 1), entry(2, "secret", 2)]
    latest = [entry(2, "secret", 1), entry(3, "default", 2), entry(4, "default", 3)]
    for jobs in (first, latest):
        await layer.group_send(groups.CLUSTER, {"type": "cluster.queue", "jobs": jobs})
    message = await client.receive_json_from(timeout=10)
    # Coalesced: the latest queue only, the other project's job left out, the places kept.
    assert message == {"type": "queue", "jobs": [entry(3, "default", 2), entry(4, "default", 3)], "total": 3}
    await client.disconnect()


def test_the_queue_is_broadcast_once_per_change_and_only_while_someone_listens(db):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(DIGEST_KEY, telemetry.WEBSOCKETS_KEY)
    layer = get_channel_layer()
    jobs = [entry(1, "default", 1)]
    changed = [entry(1, "default", 1), entry(2, "default", 2)]

    async def listen() -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add(groups.CLUSTER, channel)
        try:
            # A web process holding one cluster stream open, as it reports itself.
            await sync_to_async(client.hset)(telemetry.WEBSOCKETS_KEY, "web:1",
                                             json.dumps({"ts": time.time(), "job": 0, "cluster": 1}))
            for queue in (jobs, jobs, changed):  # the first as remembered, then one change
                await sync_to_async(broadcast_queue)(queue)
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(layer.receive(channel), timeout=1.0))
                except TimeoutError:
                    return received
        finally:
            await layer.group_discard(groups.CLUSTER, channel)

    broadcast_queue(jobs)  # nobody listens: not sent, but remembered
    received = async_to_sync(listen)()
    assert [m["jobs"] for m in received] == [changed]
    client.delete(DIGEST_KEY, telemetry.WEBSOCKETS_KEY)

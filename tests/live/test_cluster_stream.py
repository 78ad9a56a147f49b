"""The cluster stream: job summaries coalesced per client (live/cluster.py), the machine table
sent by the controller while someone listens (live/tasks.py)."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
import redis
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from clients import token_for
from django.conf import settings
from factories import bring_online
from torchyard_server.live import groups
from torchyard_server.live.cluster import LatestById
from torchyard_server.live.tasks import broadcast_machines
from torchyard_server.projects.models import Project
from torchyard_server.streaming import telemetry

pytestmark = pytest.mark.django_db(transaction=True)


def test_pending_updates_keep_the_latest_of_each_id_in_first_seen_order():
    pending = LatestById()
    assert pending.add(1, "job 1, v1") is True  # the first: a flush is due
    assert pending.add(2, "job 2, v1") is False
    assert pending.add(1, "job 1, v2") is False
    assert pending.take() == ["job 1, v2", "job 2, v1"]
    assert pending.take() == []
    assert pending.add(2, "job 2, v2") is True  # empty again: the next flush is due


def summary(job_id: int, project: str, status: str) -> dict:
    return {"id": job_id, "name": f"j{job_id}", "project": project, "status": status}


async def test_a_client_gets_each_changed_job_once_at_its_latest_and_only_of_its_projects(teammate):
    from torchyard_server.asgi import application

    await sync_to_async(Project.objects.create)(name="secret")
    key = await sync_to_async(token_for)(teammate)
    client = WebsocketCommunicator(application, "/api/cluster/stream", headers=[(b"authorization", f"Token {key}".encode())])
    assert (await client.connect())[0]
    assert (await client.receive_json_from(timeout=10))["type"] == "machines"
    assert (await client.receive_json_from(timeout=10))["type"] == "jobs"

    layer = get_channel_layer()
    for job in (summary(1, "default", "running"), summary(2, "secret", "running"), summary(1, "default", "completed"),
                summary(3, "default", "queued")):
        await layer.group_send(groups.CLUSTER, {"type": "cluster.job", "job": job})
    seen: dict[int, dict] = {}
    while seen.get(1, {}).get("status") != "completed" or 3 not in seen:
        message = await client.receive_json_from(timeout=10)
        assert message["type"] == "jobs_changed"
        ids = [job["id"] for job in message["jobs"]]
        assert len(ids) == len(set(ids))  # one summary per job in a message
        seen.update({job["id"]: job for job in message["jobs"]})
    assert 2 not in seen  # another project's job never reaches this user
    await client.disconnect()


def test_the_machine_table_is_sent_only_while_a_dashboard_listens(db):
    bring_online("m1")
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(telemetry.WEBSOCKETS_KEY)
    assert broadcast_machines() is False

    layer = get_channel_layer()

    async def listen() -> dict:
        channel = await layer.new_channel()
        await layer.group_add(groups.CLUSTER, channel)
        try:
            # A web process holding one cluster stream open, as it reports itself.
            await sync_to_async(client.hset)(telemetry.WEBSOCKETS_KEY, "web:1",
                                             json.dumps({"ts": time.time(), "job": 0, "cluster": 1}))
            assert await sync_to_async(broadcast_machines)() is True
            return await asyncio.wait_for(layer.receive(channel), timeout=10)
        finally:
            await layer.group_discard(groups.CLUSTER, channel)

    message = asyncio.run(listen())
    client.delete(telemetry.WEBSOCKETS_KEY)
    assert message["type"] == "cluster.machines"
    machines = json.loads(message["machines"])  # JSON text, sent on to the clients as it is
    assert [m["name"] for m in machines] == ["m1"]
    assert machines[0]["status"] == "online"

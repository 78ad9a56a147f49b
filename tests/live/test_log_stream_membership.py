"""The SSE log stream is in its job's group only while it is caught up (live/sse.py, _Membership):
behind (a read found a full batch: more are stored) or facing a client that has not read what it
was sent, it leaves, so the channel layer queues nothing for it; caught up again, it joins, reads
once more and follows the job live. Driven here as daphne drives it, one chunk at a time, on the
real channel layer and database."""

from __future__ import annotations

import asyncio
import contextlib
import json

import pytest
import redis
from asgiref.sync import async_to_sync, sync_to_async
from channels.layers import get_channel_layer
from django.conf import settings
from torchyard_server.live import groups, sse
from torchyard_server.live.frames import live_frames

from live.test_job_stream_frames import store_lines

pytestmark = pytest.mark.django_db(transaction=True)


def members(job) -> int:
    """The channels in the job's group (channels_redis keeps a group as a sorted set)."""
    key = get_channel_layer()._group_key(groups.job_group(job.pk))
    with redis.Redis.from_url(settings.REDIS_URL) as client:
        return client.zcard(key)


async def settled(task: asyncio.Task) -> None:
    """Let the stream run until it waits (for a live message or for its client)."""
    await asyncio.sleep(0.5)
    assert not task.done(), "the stream sent something without anything new"


def lines_in(chunk: bytes) -> list[str]:
    """The log lines of a chunk of the stream."""
    return [json.loads(line.removeprefix("data: "))["line"] for line in chunk.decode().splitlines()
            if line.startswith("data: ")]


def test_a_stream_behind_or_facing_a_slow_client_leaves_the_group_and_follows_live_once_caught_up(job):
    owner = job.owner
    store_lines(job, 1, 3)

    async def scenario() -> None:
        unread = {"bytes": 0}
        stream = sse.log_stream(user=owner, job_id=job.pk, after=0, rank=None, backlog=lambda: unread["bytes"])
        assert (await anext(stream)).startswith(b"retry:")
        assert len(lines_in(await anext(stream))) == 3
        waiting = asyncio.ensure_future(anext(stream))
        await settled(waiting)
        assert await asyncio.to_thread(members, job) == 1  # caught up: joined, waiting for live frames

        # More than a batch stored, and a message that is not frames (the job changed): it reads the
        # database, out of the group.
        more = await sync_to_async(store_lines)(job, 4, sse.READ_BATCH + 2)
        await get_channel_layer().group_send(groups.job_group(job.pk), {"type": "job.changed"})
        assert len(lines_in(await waiting)) == sse.READ_BATCH
        assert await asyncio.to_thread(members, job) == 0
        assert len(lines_in(await anext(stream))) == 2
        waiting = asyncio.ensure_future(anext(stream))
        await settled(waiting)
        assert await asyncio.to_thread(members, job) == 1

        # Live: a frame that follows on is sent as it comes.
        live = await sync_to_async(store_lines)(job, sse.READ_BATCH + 6, 1)
        await get_channel_layer().group_send(groups.job_group(job.pk), {
            "type": "job.events", "frames": live_frames([(r.pk, r.text()) for r in live], prev=more[-1].pk)})
        assert lines_in(await waiting) == [f"line {sse.READ_BATCH + 6}"]

        # The client has not read what it was sent: the stream leaves and waits for it.
        unread["bytes"] = sse.SEND_BACKLOG_LIMIT + 1
        waiting = asyncio.ensure_future(anext(stream))
        await settled(waiting)
        assert await asyncio.to_thread(members, job) == 0
        unread["bytes"] = 0  # it has read: back in the group, and what came meanwhile is sent
        await sync_to_async(store_lines)(job, sse.READ_BATCH + 7, 1)
        assert lines_in(await asyncio.wait_for(waiting, timeout=5)) == [f"line {sse.READ_BATCH + 7}"]
        waiting = asyncio.ensure_future(anext(stream))
        await settled(waiting)
        assert await asyncio.to_thread(members, job) == 1
        waiting.cancel()  # the client went: daphne cancels the response
        with contextlib.suppress(asyncio.CancelledError):
            await waiting
        assert await asyncio.to_thread(members, job) == 0

    async_to_sync(scenario)()

"""Channel-layer group names, in one place, and sending to them from synchronous code."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, Literal, TypedDict

from channels.layers import get_channel_layer
from torchyard.stream_contract import JobSummary, QueueEntry

from .frames import LiveFrame

log = logging.getLogger(__name__)
CLUSTER = "cluster"
# Batches handed to the channel layer and not sent yet, at most (GroupSender).
MAX_PENDING = 64


class JobEventsMessage(TypedDict):
    """To a job's group: a batch of its events as frames (the consumers forward them as they are)."""

    type: Literal["job.events"]
    frames: list[LiveFrame]


class JobChangedMessage(TypedDict):
    """To a job's group: its detail changed (a state, fresh progress): consumers send it again."""

    type: Literal["job.changed"]


class ClusterJobMessage(TypedDict):
    """To the cluster group: a job's latest summary (JobSummaryOut, as msgpack takes it)."""

    type: Literal["cluster.job"]
    job: JobSummary


class ClusterQueueMessage(TypedDict):
    """To the cluster group: the queue after a pass (jobs/placement/queue.py queue_entries)."""

    type: Literal["cluster.queue"]
    jobs: list[QueueEntry]


# What is sent to the groups; `type` names the consumers' handler (channels: "job.events" -> job_events).
GroupMessage = JobEventsMessage | JobChangedMessage | ClusterJobMessage | ClusterQueueMessage


def job_group(job_id: int) -> str:
    return f"job.{job_id}"


class GroupSender:
    """group_send from a synchronous loop (the ingest's) on one long-lived event loop of its own
    thread. async_to_sync would start an event loop per call, and channels_redis keeps its Redis
    connections per loop: a new connection (and its AUTH) for every message sent.

    send() hands its messages to that loop and returns: the ingest stores its next batch while they
    go out (waiting for them took 4-6 ms of a paced batch's ~30 ms in the stream bench). Batches go
    out in the order sent; at most MAX_PENDING wait, beyond which send() waits for room, so a slow
    channel layer slows the ingest down rather than filling its memory. What is still waiting when
    the process ends is lost like a failed send: the clients resume from the database."""

    def __init__(self, layer: Any = None, *, max_pending: int = MAX_PENDING) -> None:
        self.layer = layer or get_channel_layer()
        self.loop = asyncio.new_event_loop()
        self._room = threading.BoundedSemaphore(max_pending)
        self._in_order = asyncio.Lock()  # FIFO: the batches' coroutines start in the order sent
        self._thread = threading.Thread(target=self.loop.run_forever, name="group-sender", daemon=True)
        self._thread.start()

    def send(self, messages: list[tuple[str, GroupMessage]], timeout: float = 30.0) -> None:
        """Send each (group, message): the groups at once, each group's messages in order. A failure
        is logged; raises TimeoutError when no room was made for `timeout` seconds."""
        by_group: dict[str, list[GroupMessage]] = {}
        for group, message in messages:
            by_group.setdefault(group, []).append(message)
        if not self._room.acquire(timeout=timeout):
            raise TimeoutError(f"the channel layer took no batch for {timeout:.0f} s")

        async def in_order(group: str, queued: list[GroupMessage]) -> None:
            for message in queued:
                await self.layer.group_send(group, message)

        async def send_all() -> None:
            try:
                async with self._in_order:
                    results = await asyncio.gather(*(in_order(g, q) for g, q in by_group.items()),
                                                   return_exceptions=True)
                for result in results:
                    if isinstance(result, BaseException):
                        # The database has the events; the next frame tells the clients to resume.
                        log.warning("broadcast to %s failed: %s", ", ".join(sorted(by_group)), result)
                        break
            finally:
                self._room.release()

        asyncio.run_coroutine_threadsafe(send_all(), self.loop)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)

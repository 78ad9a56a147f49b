"""The cluster stream's job updates, coalesced per client.

Every batch the ingest loop applies may change a job's summary (a state, fresh progress every
JOB_REFRESH_EVERY), and each change is published to the cluster group. With many jobs running that is
more messages than a browser can draw, so each client's consumer keeps only the latest summary of
each job and sends what piled up as one `jobs_changed` message, at most once per JOB_UPDATES_EVERY.
The machine table needs no such care: it is sent whole every MACHINES_EVERY (tasks.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from torchyard import stream_contract as wire

# A browser redraws its job list at most this often.
JOB_UPDATES_EVERY = 0.5


class LatestById:
    """Pending items, the latest of each id, in the order their ids first came."""

    def __init__(self) -> None:
        self._items: dict[Any, Any] = {}

    def add(self, key: Any, item: Any) -> bool:
        """Keep `item` as the latest for `key`; True when nothing was pending before (a flush is due)."""
        first = not self._items
        self._items[key] = item
        return first

    def take(self) -> list[Any]:
        items = list(self._items.values())
        self._items.clear()
        return items


class JobUpdates:
    """One client's pending job summaries, sent JOB_UPDATES_EVERY after the first of them came,
    only those of projects the client may see."""

    def __init__(self, send: Callable[[wire.ClusterStreamMessage], Awaitable[None]],
                 visible_projects: Callable[[], Awaitable[set[str]]]) -> None:
        self.send, self.visible_projects = send, visible_projects
        self.pending = LatestById()
        self._flush: asyncio.Task | None = None

    def add(self, job: wire.JobSummary) -> None:
        if self.pending.add(job["id"], job):
            self._flush = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(JOB_UPDATES_EVERY)
        jobs = self.pending.take()
        # The group carries every job; each user gets only those of their projects.
        visible = await self.visible_projects()
        jobs = [job for job in jobs if job.get("project") in visible]
        if jobs:
            await self.send({"type": wire.JOBS_CHANGED, "jobs": jobs})

    async def close(self) -> None:
        if self._flush is not None and not self._flush.done():
            self._flush.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush


class QueueUpdates:
    """One client's queue: the latest of the queue passes' snapshots (jobs/placement/queue.py), sent
    JOB_UPDATES_EVERY after the first came, only the jobs of projects the client may see (with their
    place in the whole queue)."""

    def __init__(self, send: Callable[[wire.ClusterStreamMessage], Awaitable[None]],
                 visible_projects: Callable[[], Awaitable[set[str]]]) -> None:
        self.send, self.visible_projects = send, visible_projects
        self.latest: list[wire.QueueEntry] | None = None
        self._flush: asyncio.Task | None = None

    def add(self, entries: list[wire.QueueEntry]) -> None:
        first = self.latest is None
        self.latest = entries
        if first:
            self._flush = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(JOB_UPDATES_EVERY)
        entries, self.latest = self.latest or [], None
        visible = await self.visible_projects()
        await self.send({"type": wire.QUEUE, "jobs": [e for e in entries if e.get("project") in visible],
                         "total": len(entries)})

    async def close(self) -> None:
        if self._flush is not None and not self._flush.done():
            self._flush.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._flush

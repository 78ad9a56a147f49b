"""WebSocket streams. One consumer per stream kind; permission checked on connect.

A job stream replays the database after the client's cursor, joins the job's group, replays what was
stored meanwhile, then forwards live frames (frames.py) above its cursor: Channels hands a consumer
its messages one at a time, so nothing slips between replay and live, and no event comes twice.

A client that falls behind (the server holds more than SEND_BACKLOG_LIMIT bytes it has not read,
backpressure.py) is sent nothing more and nothing is held for it: once it has read most of that, it
catches up from its cursor in the same connection (the process's recent frames, recent.py, else the
database); one that reads nothing for CATCH_UP_WAIT_S, or for whom a live frame shows that events
were dropped on the way (its `prev` is above the cursor: a channel-layer queue that overflowed, a
broadcast that failed), is closed with CLOSE_RESUME and reconnects with ?after=<the last id it has>.
So memory stays bounded whatever a client does, and no client misses an event without being told.
A replay waits for the client to read what it was sent before it sends more.
"""

from __future__ import annotations

import asyncio

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from torchyard import stream_contract as wire
from torchyard.stream_contract import CLOSE_NOT_FOUND, CLOSE_RESUME, CLOSE_UNAUTHENTICATED

from ..jobs.api.serializers import job_detail_data, job_summary_data
from ..jobs.selectors import job_list, jobs_visible_to
from ..machines.selectors import machine_list_json
from ..projects.permissions import projects_visible_to
from ..streaming import jsontext
from ..streaming.bulk import stored_after
from ..streaming.telemetry import WEBSOCKETS
from . import groups, recent
from .backpressure import DRAIN_POLL_S, SEND_BACKLOG_LIMIT, drained, send_backlog
from .cluster import JobUpdates, QueueUpdates
from .frames import events_frame, frame_text
from .inbound import SendOnlyConsumer
from .replay import send_tail_replay, wants_tail

REPLAY_BATCH = 1000
# A client that fell behind and reads nothing for this long is closed (it resumes from its cursor).
CATCH_UP_WAIT_S = 60.0


def _after(scope) -> int:
    from urllib.parse import parse_qs

    raw = (parse_qs(scope.get("query_string", b"").decode()).get("after") or ["0"])[0]
    return int(raw) if raw.isascii() and raw.isdigit() else 0  # isdigit alone takes "²"


async def _refuse(consumer: AsyncJsonWebsocketConsumer, code: int) -> None:
    """Accept, then close with an application code: a client can tell "log in again" (4401) or
    "no such job" (4404) from a network failure and stop retrying."""
    await consumer.accept()
    await consumer.close(code=code)


class JobStreamConsumer(SendOnlyConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await _refuse(self, CLOSE_UNAUTHENTICATED)
            return
        self.job_id = int(self.scope["url_route"]["kwargs"]["job_id"])
        detail = await self._detail()
        if detail is None:
            await _refuse(self, CLOSE_NOT_FOUND)
            return
        self.group = groups.job_group(self.job_id)
        self.cursor = _after(self.scope)
        self.dropped = False
        self.recent = recent.follow(self.job_id)
        self.catching_up: asyncio.Task | None = None
        self.skipped = 0  # the last id of the live frames passed over while catching up
        await self.accept()
        WEBSOCKETS.opened(self, "job")
        await self.send_json({"type": wire.JOB, "job": detail})
        # Replayed before joining, so live batches do not pile up for a client still far behind;
        # then again after: a batch stored after that second read is broadcast after it, to us.
        if self.cursor == 0 and wants_tail(self.scope):  # a page opening: the tail first (replay.py)
            self.cursor = await send_tail_replay(self, job_id=self.job_id, backlog_limit=SEND_BACKLOG_LIMIT // 2)
        await self._replay()
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self._replay()
        # From here on, everything is live.
        await self.send_json({"type": wire.REPLAYED, "last_id": self.cursor})

    async def disconnect(self, code):
        WEBSOCKETS.closed(self)
        if hasattr(self, "recent"):
            if self.catching_up is not None:
                self.catching_up.cancel()
            recent.unfollow(self.job_id)
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def dispatch(self, message):
        # Channels' dispatch first runs close_old_connections through sync_to_async: a hop onto the
        # one thread every consumer's database calls share, for each message and client. Live
        # frames touch no database (a catch-up's reads do that hop themselves), so they skip it: with
        # 20 clients the hops queued behind replays and SSE reads made delivery seconds late.
        if message["type"] == "job.events":
            await self.job_events(message)
        else:
            await super().dispatch(message)

    async def job_events(self, message):
        for frame in message["frames"]:
            self.recent.add(frame)
            if self.dropped or frame["last"] <= self.cursor:
                continue
            if self.catching_up is not None:  # not held for a slow client: it catches up from its cursor
                self.skipped = max(self.skipped, frame["last"])
                continue
            if frame["prev"] is not None and frame["prev"] > self.cursor:  # lost on the way to us
                self.dropped = True  # what is still queued for us is ignored until the close is through
                await self.close(code=CLOSE_RESUME)
                return
            if send_backlog(self.scope) > SEND_BACKLOG_LIMIT:
                self.skipped = frame["last"]
                self.catching_up = asyncio.ensure_future(self._catch_up())
                continue
            await self.send(text_data=self._from_cursor(frame))
            self.cursor = frame["last"]

    def _from_cursor(self, frame: dict) -> str:
        """A live frame's text; only its events above the cursor when it overlaps what was sent."""
        if frame["first"] > self.cursor:
            return frame["text"]
        events = [e for e in jsontext.decode(frame["text"])["events"] if e["id"] > self.cursor]
        return events_frame(events, prev=self.cursor)

    async def _catch_up(self) -> None:
        """A client that fell behind (more than SEND_BACKLOG_LIMIT bytes unread) gets, once it has
        read most of that, what came since its cursor: from this process's recent frames
        (recent.py), else from the database, in this connection; live frames meanwhile are passed
        over, not held. One that reads nothing for CATCH_UP_WAIT_S is closed with CLOSE_RESUME."""
        try:
            while not self.dropped:
                if not await self._drained():
                    self.dropped = True
                    await self.close(code=CLOSE_RESUME)
                    return
                kept = self.recent.after(self.cursor)
                if kept:
                    frame = kept[0]
                    await self.send(text_data=self._from_cursor(frame))
                    self.cursor = frame["last"]
                    continue
                if kept == [] and self.skipped <= self.cursor:
                    return  # caught up: no await since the last look, so no live frame slipped by
                read = await self._read(self.cursor)
                if read is not None:
                    self.cursor, text = read
                    await self.send(text_data=text)
                elif self.skipped <= self.cursor or not self.recent.after(self.cursor):
                    return
        finally:
            self.catching_up = None

    async def _drained(self) -> bool:
        """Wait until the client has read all but SEND_BACKLOG_LIMIT // 2 bytes; False after
        CATCH_UP_WAIT_S without."""
        deadline = asyncio.get_running_loop().time() + CATCH_UP_WAIT_S
        while send_backlog(self.scope) > SEND_BACKLOG_LIMIT // 2:
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(DRAIN_POLL_S)
        return True

    async def _replay(self) -> None:
        """Send what is stored after the cursor, a frame per REPLAY_BATCH events, each once the
        client has read most of what it was sent before."""
        while True:
            read = await self._read(self.cursor)
            if read is None:
                return
            await drained(lambda: send_backlog(self.scope))
            last, frame = read
            await self.send(text_data=frame)
            self.cursor = last

    async def job_changed(self, message):
        if self.dropped:
            return
        detail = await self._detail()
        if detail is None:  # deleted, or the user left its project
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json({"type": wire.JOB, "job": detail})

    @database_sync_to_async
    def _detail(self):
        job = jobs_visible_to(self.scope["user"]).prefetch_related("nodes").filter(pk=self.job_id).first()
        return job_detail_data(job) if job else None

    @database_sync_to_async
    def _read(self, after: int) -> tuple[int, str] | None:
        """The next replay frame after the cursor, and its last id; None when there is none."""
        rows = stored_after(job_id=self.job_id, after=after, limit=REPLAY_BATCH)
        if not rows:
            return None
        return rows[-1].pk, frame_text([row.text() for row in rows], prev=after, last=rows[-1].pk, replay=True)


class ClusterStreamConsumer(SendOnlyConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await _refuse(self, CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(groups.CLUSTER, self.channel_name)
        await self.accept()
        WEBSOCKETS.opened(self, "cluster")
        machines, jobs = await self._snapshot()
        await self.send_machines(machines)
        await self.send_json({"type": wire.JOBS, "jobs": jobs})

    async def disconnect(self, code):
        WEBSOCKETS.closed(self)
        if hasattr(self, "job_updates"):
            await self.job_updates.close()
        if hasattr(self, "queue_updates"):
            await self.queue_updates.close()
        await self.channel_layer.group_discard(groups.CLUSTER, self.channel_name)

    async def cluster_machines(self, message):
        await self.send_machines(message["machines"])

    async def send_machines(self, machines: str) -> None:
        """The machine table, JSON text as machine_list_json wrote it (tasks.py), sent on as it is."""
        await self.send(text_data=f'{{"type": "{wire.MACHINES}", "machines": ' + machines + "}")

    async def cluster_job(self, message):
        # Coalesced (cluster.py): the latest of each job, one message per JOB_UPDATES_EVERY.
        if not hasattr(self, "job_updates"):
            self.job_updates = JobUpdates(self.send_json, self._visible_projects)
        self.job_updates.add(message["job"])

    async def cluster_queue(self, message):
        # The queue after a pass (live/queue.py): the latest, one message per JOB_UPDATES_EVERY.
        if not hasattr(self, "queue_updates"):
            self.queue_updates = QueueUpdates(self.send_json, self._visible_projects)
        self.queue_updates.add(message["jobs"])

    @database_sync_to_async
    def _visible_projects(self) -> set[str]:
        return set(projects_visible_to(self.scope["user"]).values_list("name", flat=True))

    @database_sync_to_async
    def _snapshot(self):
        machines = machine_list_json()
        jobs = [job_summary_data(j) for j in job_list(user=self.scope["user"])[:200]]
        return machines, jobs

"""WebSocket streams. One consumer per stream kind; permission checked on connect.

Channels hands a consumer its messages one at a time, so a job stream can join the group first,
replay the database after the client's cursor, and then drop live events it already replayed:
no gap, no duplicate."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from ..jobs.selectors import job_list, jobs_visible_to
from ..jobs.serializers import job_detail_data, job_summary_data
from ..machines.selectors import machine_list
from ..machines.serializers import MachineOut
from ..projects.permissions import projects_visible_to
from . import groups
from .cluster import JobUpdates
from .selectors import job_events
from .telemetry import WEBSOCKETS

REPLAY_BATCH = 1000
CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404


def _after(scope) -> int:
    from urllib.parse import parse_qs

    raw = (parse_qs(scope.get("query_string", b"").decode()).get("after") or ["0"])[0]
    return int(raw) if raw.isdigit() else 0


async def _refuse(consumer: AsyncJsonWebsocketConsumer, code: int) -> None:
    """Accept, then close with an application code: a client can tell "log in again" (4401) or
    "no such job" (4404) from a network failure and stop retrying."""
    await consumer.accept()
    await consumer.close(code=code)


class JobStreamConsumer(AsyncJsonWebsocketConsumer):
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
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        WEBSOCKETS.opened(self, "job")
        await self.send_json({"type": "job", "job": detail})
        while True:
            batch = await self._replay(self.cursor)
            if not batch:
                break
            await self.send_json({"type": "events", "events": batch, "replay": True})
            self.cursor = batch[-1]["id"]
        # From here on, everything is live.
        await self.send_json({"type": "replayed", "last_id": self.cursor})

    async def disconnect(self, code):
        WEBSOCKETS.closed(self)
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def job_events(self, message):
        fresh = [e for e in message["events"] if e["id"] > self.cursor]
        if fresh:
            self.cursor = fresh[-1]["id"]
            await self.send_json({"type": "events", "events": fresh})

    async def job_changed(self, message):
        detail = await self._detail()
        if detail is None:  # deleted, or the user left its project
            await self.close(code=CLOSE_NOT_FOUND)
            return
        await self.send_json({"type": "job", "job": detail})

    @database_sync_to_async
    def _detail(self):
        job = jobs_visible_to(self.scope["user"]).prefetch_related("nodes").filter(pk=self.job_id).first()
        return job_detail_data(job) if job else None

    @database_sync_to_async
    def _replay(self, after: int):
        return [e.as_message() for e in job_events(job_id=self.job_id, after=after, limit=REPLAY_BATCH)]


class ClusterStreamConsumer(AsyncJsonWebsocketConsumer):
    async def connect(self):
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await _refuse(self, CLOSE_UNAUTHENTICATED)
            return
        await self.channel_layer.group_add(groups.CLUSTER, self.channel_name)
        await self.accept()
        WEBSOCKETS.opened(self, "cluster")
        machines, jobs = await self._snapshot()
        await self.send_json({"type": "machines", "machines": machines})
        await self.send_json({"type": "jobs", "jobs": jobs})

    async def disconnect(self, code):
        WEBSOCKETS.closed(self)
        if hasattr(self, "job_updates"):
            await self.job_updates.close()
        await self.channel_layer.group_discard(groups.CLUSTER, self.channel_name)

    async def cluster_machines(self, message):
        await self.send_json({"type": "machines", "machines": message["machines"]})

    async def cluster_job(self, message):
        # Coalesced (cluster.py): the latest of each job, one message per JOB_UPDATES_EVERY.
        if not hasattr(self, "job_updates"):
            self.job_updates = JobUpdates(self.send_json, self._visible_projects)
        self.job_updates.add(message["job"])

    @database_sync_to_async
    def _visible_projects(self) -> set[str]:
        return set(projects_visible_to(self.scope["user"]).values_list("name", flat=True))

    @database_sync_to_async
    def _snapshot(self):
        machines = MachineOut(machine_list(), many=True).data
        jobs = [job_summary_data(j) for j in job_list(user=self.scope["user"])[:200]]
        return machines, jobs

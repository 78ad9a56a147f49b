"""The ingest loop's committed batches, sent to the clients that follow their jobs (registered as a
streaming.registries.BatchListener in LiveConfig.ready(); it runs in the ingest's process).

One group message per job and batch: its events as frames written once (frames.py), each naming the
job's event before it, so a client that missed one (a dropped message, a failed send) knows to resume
from its cursor. A batch that changes a job's summary (a state, a stall, fresh progress every
JOB_REFRESH_EVERY) also tells the job page to read the job again and the cluster stream the summary.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import OrderedDict, defaultdict
from typing import Any

from django.db.models import Max
from torchyard import protocol

from ..jobs.api.serializers import job_summary_data
from ..jobs.models import Job
from ..streaming.bulk import StoredEvent
from ..streaming.models import JobEvent
from ..streaming.registries import BatchListener
from . import groups
from .frames import live_frames

log = logging.getLogger(__name__)
# Jobs whose last broadcast id is remembered (the `prev` of their next frame); others are looked up.
REMEMBERED_JOBS = 10_000
# Metrics move progress and node liveness on the job page; refresh its snapshot this often at most.
JOB_REFRESH_EVERY = 2.0


class Broadcast(BatchListener):
    type = "live_broadcast"

    def __init__(self) -> None:
        self._sender: groups.GroupSender | None = None
        self._last_refresh: dict[int, float] = {}
        # The id of the last event broadcast per job: the `prev` of its next frame.
        self._last_sent: OrderedDict[int, int] = OrderedDict()

    @property
    def sender(self) -> groups.GroupSender:
        # Started on the first batch: every process registers this, only the ingest's sends.
        if self._sender is None:
            self._sender = groups.GroupSender()
        return self._sender

    def batch_committed(self, rows: list[StoredEvent]) -> None:
        by_job: dict[int, list[StoredEvent]] = defaultdict(list)
        for row in rows:
            by_job[row.job_id].append(row)
        messages: list[tuple[str, groups.GroupMessage]] = []
        for job_id, items in by_job.items():
            prev = self._prev_sent(job_id, items[0].pk)
            frames = live_frames([(r.pk, r.text()) for r in items], prev=prev)
            messages.append((groups.job_group(job_id), {"type": "job.events", "frames": frames}))
            self._last_sent[job_id] = items[-1].pk
            self._last_sent.move_to_end(job_id)
            if len(self._last_sent) > REMEMBERED_JOBS:
                self._last_sent.popitem(last=False)
            messages.extend(self._job_changed(job_id, items))
        if messages:
            self._send(messages)

    def _job_changed(self, job_id: int, items: list[StoredEvent]) -> list[tuple[str, groups.GroupMessage]]:
        changed = any(r.type in (protocol.STATE, protocol.STALLED) for r in items)
        now = time.monotonic()
        due = any(r.type == protocol.METRIC for r in items) and (
            now - self._last_refresh.get(job_id, 0.0) >= JOB_REFRESH_EVERY
        )
        if not (changed or due):
            return []
        self._last_refresh[job_id] = now
        job = Job.objects.select_related("owner").filter(pk=job_id).first()
        if job is None:
            return []
        summary = _jsonable(job_summary_data(job))
        return [(groups.job_group(job_id), {"type": "job.changed"}),
                (groups.CLUSTER, {"type": "cluster.job", "job": summary})]

    def _prev_sent(self, job_id: int, first: int) -> int | None:
        """The id of the job's event before `first`: remembered, or looked up (after a restart)."""
        if job_id in self._last_sent:
            return self._last_sent[job_id]
        return JobEvent.objects.filter(job_id=job_id, id__lt=first).aggregate(last=Max("id"))["last"] or 0

    def _send(self, messages: list[tuple[str, groups.GroupMessage]]) -> None:
        try:
            self.sender.send(messages)
        except Exception as exc:  # the database has it; the next frame tells its clients to resume
            log.warning("ingest: broadcast to %s failed: %s", ", ".join(sorted({g for g, _ in messages})), exc)


def _jsonable(value: Any) -> Any:
    """The channel layer serializes with msgpack: turn datetimes and the like into strings."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (dt.datetime, dt.date)):
        return value.isoformat()
    return str(value)

"""A job's log lines as Server-Sent Events (the Rust coordinator's `GET /jobs/{id}/logs/stream`), for clients
that would rather read a plain HTTP response than hold a WebSocket (`curl -N`, EventSource).

Each line is one event whose `id:` is the event id, so a client that reconnects with
`Last-Event-ID` (EventSource does it by itself) gets every line after it, with no gap and no
duplicate. The stream follows the job live and ends with an `end` event when the job has finished
and no node of it is left running; a reconnect after that answers 204, which tells EventSource to
stop reconnecting.

Lines come from the database, and while the stream is caught up from the live frames of the job's
channel-layer group (the one the WebSocket consumer joins): a read that found fewer than READ_BATCH
lines also took the job's last event id before it (`seen`: every event up to it is accounted for),
and a frame that follows on from `seen` (its `prev`) carries every event after it, of which the
stream sends the log lines, without reading them back. Any other message (the job changed, a frame
that does not follow on: a message lost on the way), or POLL_EVERY seconds since the last read (the
user's access, the job's end), sends it back to the database. Ingest stores a batch before it
broadcasts it and is the only writer of events, so a read after a wake-up sees the batch and
everything before it; a wake-up that never came (a full channel, a Redis restart) costs at most
POLL_EVERY seconds, never a line. Reading every line back cost the web process more than all its
WebSocket clients together (py-spy, backend/README.md "The event path").

The stream is in the job's group only while it is caught up (_Membership): one that reads the
database (a full batch: more are stored) or waits for a slow client (SEND_BACKLOG_LIMIT bytes sent
and not yet taken, backpressure.py) leaves it, so the web process holds nothing live for it, and
joins again, then reads once more, when a read finds it caught up. So memory stays bounded however
far behind or slow the client.
"""

from __future__ import annotations

import asyncio
import functools
import json
from collections.abc import AsyncIterator, Callable
from typing import Any, NotRequired, TypedDict

from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from django.db import connection
from django.http import HttpResponse, StreamingHttpResponse
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.renderers import JSONRenderer
from rest_framework.views import APIView

from ..jobs.models import JobNode
from ..jobs.selectors import job_visible_or_404, jobs_visible_to
from ..jobs.states import JOB_FINAL, NODE_LIVE
from ..rest.params import int_param
from ..rest.renderers import StreamRenderer
from ..streaming import jsontext
from ..streaming.bulk import stored_after
from ..streaming.models import JobEvent
from ..streaming.selectors import job_events, job_events_tail
from ..streaming.serializers import LogStreamEventOut
from . import groups
from .backpressure import SEND_BACKLOG_LIMIT, drained, send_backlog

READ_BATCH = 1000
# Without a wake-up, look at the database (and send a keep-alive comment) this often.
POLL_EVERY = 5.0
# What EventSource waits before reconnecting after a dropped connection, in ms.
RETRY_MS = 2000
LOG = [str(JobEvent.Type.LOG)]


class EventStreamRenderer(StreamRenderer):
    """Lets DRF accept `Accept: text/event-stream`; the stream itself skips rendering, and an error
    body is still JSON, labelled so."""

    media_type = "text/event-stream"
    format = "sse"


class StreamEnd(TypedDict):
    """The `end` event's data: the job's final status (null: no such job, `detail` says so) and the
    last event id sent (LogStreamEventOut)."""

    job: int
    status: str | None
    status_reason: NotRequired[str]
    last_id: NotRequired[int]
    detail: NotRequired[str]


class JobState(TypedDict):
    status: str
    status_reason: str
    finished: bool  # a final status, and no node left running


def sse_message(data: StreamEnd, *, event: str, id: int | None = None) -> bytes:
    head = f"id: {id}\n" if id is not None else ""
    return f"{head}event: {event}\ndata: {json.dumps(data, separators=(',', ':'), default=str)}\n\n".encode()


def _start_cursor(request, job_id: int, rank: int | None) -> int:
    """`Last-Event-ID` (a reconnect) wins over `?after=`; `?tail=N` starts N lines back."""
    header = request.headers.get("Last-Event-ID", "").strip()
    if header:
        if not header.isdigit():
            raise ValidationError({"Last-Event-ID": ["must be an event id (a non-negative integer)."]})
        return int(header)
    after = int_param(request, "after", 0)
    tail = int_param(request, "tail", None, maximum=10_000)
    if tail is not None:
        lines = job_events_tail(job_id=job_id, count=tail, after=after, types=LOG, rank=rank)
        return lines[0].pk - 1 if lines else after
    return after


def _job_state(user: Any, job_id: int) -> JobState | None:
    """None when the job is gone (deleted, or the user may no longer see it); else its status and
    whether it has finished: a final status and no node left running (a node that is being stopped
    still sends its last lines)."""
    job = jobs_visible_to(user).filter(pk=job_id).values("status", "status_reason").first()
    if job is None:
        return None
    live_nodes = JobNode.objects.filter(job_id=job_id, status__in=NODE_LIVE).exists()
    return {"status": job["status"], "status_reason": job["status_reason"],
            "finished": job["status"] in JOB_FINAL and not live_nodes}


def _read(user: Any, job_id: int, after: int,
          rank: int | None) -> tuple[JobState | None, list[int], bytes, int | None]:
    """The job's state, then the ids of the lines stored after the cursor and their `log` events,
    written as one chunk (bulk.StoredEvent rows: no model instance, no encoding of a whole event
    per line, one send per batch), and `seen` (module docstring; None after a full batch)."""
    # The state first: a line stored after it was read comes in this read or the next one, and a
    # job seen finished stored its last lines before. The last id before the lines, likewise.
    try:
        state = _job_state(user, job_id)
        upto = JobEvent.objects.filter(job_id=job_id).order_by("-id").values_list("id", flat=True).first() or 0
        rows = stored_after(job_id=job_id, after=after, limit=READ_BATCH, types=LOG, rank=rank)
    finally:
        # A stream lives as long as its client: its connection goes back to the pool between reads,
        # so the number of clients is not bounded by the pool's size. (Not inside a transaction: a
        # test's.)
        if not connection.in_atomic_block:
            connection.close()
    chunk = "".join(f"id: {row.pk}\nevent: log\ndata: {row.text()}\n\n" for row in rows).encode()
    return state, [row.pk for row in rows], chunk, (upto if len(rows) < READ_BATCH else None)


def _live_lines(message: groups.GroupMessage, seen: int, cursor: int,
                rank: int | None) -> tuple[int, list[int], bytes] | None:
    """The log lines of a live message's frames after the cursor, as _read writes them, and the new
    `seen`; None when the message is not frames that follow on from `seen`. (The read that took
    `seen` may have read lines stored after it: the cursor, not `seen`, says which were sent.)"""
    if message["type"] != "job.events":
        return None
    ids, texts = [], []
    for frame in message["frames"]:
        if frame["last"] <= seen:
            continue
        if frame["prev"] is None or frame["prev"] > seen:
            return None
        for event in jsontext.decode(frame["text"])["events"]:
            if event["id"] > cursor and event["type"] == LOG[0] and (rank is None or event.get("rank") == rank):
                ids.append(event["id"])
                texts.append(f"id: {event['id']}\nevent: log\ndata: {jsontext.encode(event)}\n\n")
        seen = frame["last"]
    return seen, ids, "".join(texts).encode()


class _Membership:
    """The stream's place in its job's group, held only while the stream is caught up. A process
    pulls each group message once and queues it for every channel of the group in it until that
    channel takes it, so a member that reads the database instead (behind a flood, or waiting for
    a slow client) kept every frame the process received meanwhile: 470 MB in one bench (memray).
    One channel for the stream's life: what was queued for it before it left is taken (and passed
    over: frames already read) when it is back."""

    def __init__(self, layer: Any, group: str) -> None:
        self.layer, self.group = layer, group
        self.channel: str | None = None
        self.joined = False
        self.wake: asyncio.Task | None = None

    async def join(self) -> bool:
        """Join; False when already joined."""
        if self.joined:
            return False
        if self.channel is None:
            self.channel = await self.layer.new_channel()
        await self.layer.group_add(self.group, self.channel)
        self.joined = True
        return True

    async def leave(self) -> None:
        if self.wake is not None:
            self.wake.cancel()  # channels_redis drops the channel's queue with its pending receive
            self.wake = None
        if self.joined:
            await self.layer.group_discard(self.group, self.channel)
            self.joined = False

    async def close(self) -> None:
        await self.leave()
        # A message queued after the last receive stays in channels_redis's buffer for the channel
        # (it drops one only with a cancelled receive): gone with the stream.
        buffers = getattr(self.layer, "receive_buffer", None)
        if buffers is not None and self.channel is not None:
            buffers.pop(self.channel, None)

    async def next(self, timeout: float) -> groups.GroupMessage | None:
        """The next group message; None after `timeout` (the receive stays pending for the next call)."""
        assert self.joined and self.channel is not None
        if self.wake is None:
            self.wake = asyncio.ensure_future(self.layer.receive(self.channel))
        done, _ = await asyncio.wait({self.wake}, timeout=timeout)
        if not done:
            return None
        message, self.wake = self.wake.result(), None
        return message


async def log_stream(*, user: Any, job_id: int, after: int, rank: int | None,
                     backlog: Callable[[], int] = lambda: 0) -> AsyncIterator[bytes]:
    """The stream's chunks; `backlog` answers what daphne holds for the client (backpressure.py)."""
    member = _Membership(get_channel_layer(), groups.job_group(job_id))
    clock = asyncio.get_running_loop().time
    try:
        yield f"retry: {RETRY_MS}\n\n".encode()
        cursor = after
        while True:
            if backlog() > SEND_BACKLOG_LIMIT:  # a slow client: nothing live is held for it
                await member.leave()
                await drained(backlog)  # if it never reads, this ends with it: Django cancels the response
            state, lines, chunk, seen = await sync_to_async(_read)(user, job_id, cursor, rank)
            read_at = clock()
            behind = len(lines) == READ_BATCH  # more are stored: catch up from the database, out of the group
            if behind:
                await member.leave()
            if lines:
                yield chunk
                cursor = lines[-1]
            if behind:
                continue
            if state is None:
                yield sse_message({"job": job_id, "status": None, "detail": "no such job."}, event="end")
                return
            if state["finished"]:
                yield sse_message({"job": job_id, "status": state["status"], "status_reason": state["status_reason"],
                                   "last_id": cursor}, event="end")
                return
            if await member.join():
                continue  # read once more: a batch stored before the join is in the database, any later one comes live
            while backlog() <= SEND_BACKLOG_LIMIT:  # live frames while they follow on; then the database
                message = await member.next(timeout=POLL_EVERY)
                if message is None:
                    if not lines:
                        yield b": keep-alive\n\n"
                    break
                live = _live_lines(message, seen, cursor, rank) if seen is not None and clock() - read_at < POLL_EVERY else None
                if live is None:
                    break
                seen, ids, live_chunk = live
                if ids:
                    yield live_chunk
                    cursor = ids[-1]
    finally:
        await member.close()


class JobLogStreamView(APIView):
    """Log lines as Server-Sent Events (`text/event-stream`): each `event: log` carries an event as
    `/api/jobs/{id}/logs` shows it, with its id as the SSE id; the stream follows the job and
    closes with `event: end` once it has finished. Reconnect with `Last-Event-ID` (or `?after=`)
    to resume with no gap and no duplicate; 204 when the job has finished and nothing is left."""

    renderer_classes = [JSONRenderer, EventStreamRenderer]

    @extend_schema(
        parameters=[
            OpenApiParameter("Last-Event-ID", int, location=OpenApiParameter.HEADER,
                             description="Resume after this event id (sent by EventSource on reconnect)."),
            OpenApiParameter("after", int, description="Resume after this event id (when no Last-Event-ID)."),
            OpenApiParameter("tail", int, description="Start with the last N lines."),
            OpenApiParameter("rank", int, description="Only this global rank's lines."),
        ],
        responses={
            (200, "text/event-stream"): OpenApiResponse(LogStreamEventOut, description="The event stream, one of these per event."),
            204: OpenApiResponse(description="The job has finished and nothing is left after the cursor."),
        },
    )
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        rank = int_param(request, "rank", None)
        after = _start_cursor(request, job.pk, rank)
        state = _job_state(request.user, job.pk)
        if state is not None and state["finished"] and not job_events(job_id=job.pk, after=after, types=LOG, rank=rank,
                                                                     limit=1).exists():
            return HttpResponse(status=204)
        stream = log_stream(user=request.user, job_id=job.pk, after=after, rank=rank,
                            backlog=functools.partial(send_backlog, getattr(request, "scope", {})))  # no scope under WSGI
        response = StreamingHttpResponse(stream, content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # a proxy such as nginx must not hold the stream back
        return response

"""The job stream's frames: the replay and live frames name the event before them (`prev`), live
frames reach the client as ingest wrote them, a frame that overlaps the replay is cut at the
cursor, and a client for whom events were lost on the way is told to resume (4429) rather than
shown a gap.

Through the project's whole ASGI application, a real channel layer on Redis and the test database,
with Channels' test communicator (no daphne here: the send-backlog probe has nothing to read, so
the drop for a client that does not read is exercised by the stream bench)."""

from __future__ import annotations

import asyncio
import datetime as dt
import json

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from torchyard_server.jobs.models import Job
from torchyard_server.live import groups
from torchyard_server.live.consumers import CLOSE_RESUME
from torchyard_server.live.frames import live_frames
from torchyard_server.streaming.bulk import StoredEvent, insert_events

pytestmark = pytest.mark.django_db(transaction=True)



def store_lines(job: Job, first_seq: int, count: int) -> list[StoredEvent]:
    """Log lines stored as ingest stores them (ids from the sequence, one COPY)."""
    rows = [StoredEvent(job_id=job.pk, node_id=None, attempt=0, node_rank=0, rank=0, type="log",
                        ts=dt.datetime.now(dt.UTC), payload={"stream": "stdout", "line": f"line {seq}"},
                        dedupe_key=f"c{job.pk}-{seq}")
            for seq in range(first_seq, first_seq + count)]
    insert_events(rows)
    return rows


def broadcast(job: Job, rows: list[StoredEvent], prev: int | None) -> None:
    async_to_sync(get_channel_layer().group_send)(groups.job_group(job.pk), {
        "type": "job.events", "frames": live_frames([(r.pk, r.text()) for r in rows], prev=prev)})


class Stream:
    def __init__(self, path: str, headers) -> None:
        from torchyard_server.asgi import application

        self.loop = asyncio.new_event_loop()
        self.communicator = WebsocketCommunicator(application, path, headers=headers)

    def run(self, coroutine):
        return self.loop.run_until_complete(coroutine)

    def next(self) -> dict:
        try:
            return self.run(self.communicator.receive_output(timeout=10))
        except TimeoutError:
            raise AssertionError("the stream sent nothing for 10 s") from None

    def frames_until_replayed(self) -> list[dict]:
        connected, _ = self.run(self.communicator.connect(timeout=10))
        assert connected
        frames = []
        while (frame := json.loads(self.next()["text"]))["type"] != "replayed":
            frames.append(frame)
        return frames

    def close(self) -> None:
        self.run(self.communicator.disconnect())
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        self.run(asyncio.gather(*pending, return_exceptions=True))
        self.loop.close()


def test_live_frames_follow_the_replay_as_ingest_wrote_them_and_an_overlap_is_cut_at_the_cursor(member, job):
    stored = store_lines(job, 1, 3)
    stream = Stream(f"/api/jobs/{job.pk}/stream?after=0", member)
    try:
        replay = [f for f in stream.frames_until_replayed() if f["type"] == "events"]
        assert [(f["prev"], f["last"], f["count"], f["replay"]) for f in replay] == [(0, stored[-1].pk, 3, True)]
        assert [e["line"] for e in replay[0]["events"]] == ["line 1", "line 2", "line 3"]

        # Broadcast late: its first two events were in the replay already.
        later = store_lines(job, 4, 2)
        broadcast(job, stored[1:] + later, prev=stored[0].pk)
        cut = json.loads(stream.next()["text"])
        assert (cut["prev"], cut["last"], [e["line"] for e in cut["events"]]) == (
            stored[-1].pk, later[-1].pk, ["line 4", "line 5"])

        # Continuing where it left off: forwarded as written, byte for byte.
        last = store_lines(job, 6, 1)
        broadcast(job, last, prev=later[-1].pk)
        frame = live_frames([(r.pk, r.text()) for r in last], prev=later[-1].pk)[0]["text"]
        assert stream.next() == {"type": "websocket.send", "text": frame}
        assert json.loads(frame)["events"][0] == last[0].message()
    finally:
        stream.close()


def test_a_client_that_missed_a_frame_is_told_to_resume_and_the_resume_has_everything(member, job):
    stored = store_lines(job, 1, 2)
    stream = Stream(f"/api/jobs/{job.pk}/stream?after=0", member)
    try:
        stream.frames_until_replayed()
        lost, after_it = store_lines(job, 3, 2), store_lines(job, 5, 1)
        # The message with `lost` never reached this client (a full channel, a failed send).
        broadcast(job, after_it, prev=lost[-1].pk)
        assert stream.next() == {"type": "websocket.close", "code": CLOSE_RESUME}
    finally:
        stream.close()

    resumed = Stream(f"/api/jobs/{job.pk}/stream?after={stored[-1].pk}", member)
    try:
        events = [e for f in resumed.frames_until_replayed() if f["type"] == "events" for e in f["events"]]
        assert [e["line"] for e in events] == ["line 3", "line 4", "line 5"]
    finally:
        resumed.close()

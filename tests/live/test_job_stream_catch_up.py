"""A job stream's client that falls behind (its server holds more than SEND_BACKLOG_LIMIT bytes it
has not read) is not sent more, nor is anything held for it: once it has read most of what it had,
it gets everything after its cursor in the same connection, from the web process's recent frames
or, when those no longer reach back to its cursor, from the database; one that reads nothing is
closed with 4429 (resume from your cursor).

Daphne's write buffer is what the consumer asks (backpressure.py); Channels' test communicator has
none, so the tests set the number it answers, as the send-backlog probe would put it in the scope."""

from __future__ import annotations

import json

import pytest
from channels.testing import WebsocketCommunicator
from torchyard_server.live import consumers, recent
from torchyard_server.live.backpressure import SCOPE_KEY

from live.test_job_stream_frames import Stream, broadcast, store_lines

pytestmark = pytest.mark.django_db(transaction=True)


class SlowClientStream(Stream):
    """A stream whose server holds `unread` bytes for its client."""

    def __init__(self, path: str, headers) -> None:
        from torchyard_server.asgi import application

        super().__init__(path, headers)
        self.unread = 0

        async def app(scope, receive, send):
            return await application({**scope, SCOPE_KEY: lambda: self.unread}, receive, send)

        self.communicator = WebsocketCommunicator(app, path, headers=headers)

    def quiet(self) -> bool:
        return self.run(self.communicator.receive_nothing(timeout=0.3))

    def events_until(self, last_id: int) -> list[dict]:
        frames = []
        while not frames or frames[-1]["last"] < last_id:
            message = self.next()
            assert message["type"] == "websocket.send", message
            frames.append(json.loads(message["text"]))
        return frames


def fall_behind(stream: SlowClientStream, job, after, first_line: int) -> tuple[list, list]:
    """The client stops reading (over the backlog limit) while two batches go out: it gets neither."""
    stream.unread = consumers.SEND_BACKLOG_LIMIT + 1
    first = store_lines(job, first_line, 2)
    broadcast(job, first, prev=after[-1].pk)
    second = store_lines(job, first_line + 2, 1)
    broadcast(job, second, prev=first[-1].pk)
    assert stream.quiet()  # nothing more for a client that has not read what it has
    stream.unread = 0
    return first, second


def test_a_client_that_fell_behind_gets_what_it_missed_from_the_recent_frames_once_it_has_read(member, job):
    stored = store_lines(job, 1, 2)
    stream = SlowClientStream(f"/api/jobs/{job.pk}/stream?after=0", member)
    try:
        stream.frames_until_replayed()
        first, second = fall_behind(stream, job, stored, 3)
        frames = stream.events_until(second[-1].pk)
        assert [(f["prev"], f["last"]) for f in frames] == [(stored[-1].pk, first[-1].pk), (first[-1].pk, second[-1].pk)]
        assert [e["line"] for f in frames for e in f["events"]] == ["line 3", "line 4", "line 5"]

        # Live again: the next frame is forwarded as ingest wrote it.
        third = store_lines(job, 6, 1)
        broadcast(job, third, prev=second[-1].pk)
        assert json.loads(stream.next()["text"])["events"][0]["line"] == "line 6"
    finally:
        stream.close()


def test_when_the_recent_frames_no_longer_reach_its_cursor_it_catches_up_from_the_database(member, job, monkeypatch):
    monkeypatch.setattr(recent, "RECENT_BYTES", 1)  # only the last frame is kept
    stored = store_lines(job, 1, 1)
    stream = SlowClientStream(f"/api/jobs/{job.pk}/stream?after=0", member)
    try:
        stream.frames_until_replayed()
        _first, second = fall_behind(stream, job, stored, 2)
        frames = stream.events_until(second[-1].pk)
        assert [(f["prev"], f.get("replay")) for f in frames] == [(stored[-1].pk, True)]
        assert [e["line"] for e in frames[0]["events"]] == ["line 2", "line 3", "line 4"]
    finally:
        stream.close()


def test_a_client_that_reads_nothing_is_closed_to_resume_from_its_cursor(member, job, monkeypatch):
    monkeypatch.setattr(consumers, "CATCH_UP_WAIT_S", 0.2)
    stored = store_lines(job, 1, 1)
    stream = SlowClientStream(f"/api/jobs/{job.pk}/stream?after=0", member)
    try:
        stream.frames_until_replayed()
        stream.unread = consumers.SEND_BACKLOG_LIMIT + 1
        broadcast(job, store_lines(job, 2, 1), prev=stored[-1].pk)
        assert stream.next() == {"type": "websocket.close", "code": consumers.CLOSE_RESUME}
    finally:
        stream.close()

"""The SSE log stream sends live lines from the job's frames only while they follow on from what it
accounted for (`seen`), and never a line at or below its cursor: the read that took `seen` may
have read lines stored after it (live/sse.py)."""

from __future__ import annotations

from torchyard_server.live.frames import live_frames
from torchyard_server.live.sse import _live_lines


def event(pk: int, kind: str = "log", rank: int = 0) -> tuple[int, str]:
    return pk, f'{{"line":"line {pk}","id":{pk},"rank":{rank},"type":"{kind}"}}'


def message(events: list[tuple[int, str]], prev: int | None) -> dict:
    return {"type": "job.events", "frames": live_frames(events, prev=prev)}


def test_lines_after_the_cursor_are_sent_from_frames_that_follow_on_and_none_twice():
    # seen 5 (the last id before the read), cursor 7 (the read also found lines 6 and 7).
    live = _live_lines(message([event(6), event(7), event(8, "state"), event(9)], prev=5), seen=5, cursor=7, rank=None)
    assert live is not None
    seen, ids, chunk = live
    assert (seen, ids) == (9, [9])
    assert chunk.decode().startswith("id: 9\nevent: log\ndata: {")


def test_only_the_asked_ranks_lines_are_sent():
    live = _live_lines(message([event(2, rank=0), event(3, rank=1)], prev=1), seen=1, cursor=1, rank=1)
    assert live is not None and live[1] == [3]


def test_a_frame_that_does_not_follow_on_or_another_message_sends_the_stream_back_to_the_database():
    assert _live_lines(message([event(7)], prev=6), seen=5, cursor=5, rank=None) is None  # 6 was lost
    assert _live_lines({"type": "job.changed"}, seen=5, cursor=5, rank=None) is None

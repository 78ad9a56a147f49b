"""The job stream's `events` frames as live/frames.py writes them: valid JSON with the header a client
checks its cursor against, and a large batch cut into frames that chain by `prev`."""

from __future__ import annotations

import json

import pytest
from torchyard_server.live import frames


def line(pk: int) -> tuple[int, str]:
    return pk, json.dumps({"id": pk, "type": "log", "line": f"line {pk}"})


def test_a_frame_is_json_whose_header_names_the_event_before_it_and_its_last():
    text = frames.frame_text([line(4)[1], line(5)[1]], prev=3, last=5)
    assert json.loads(text) == {"type": "events", "prev": 3, "last": 5, "count": 2, "events": [
        {"id": 4, "type": "log", "line": "line 4"}, {"id": 5, "type": "log", "line": "line 5"}]}
    # The header comes first: a client may read it without the events.
    assert text.startswith('{"type":"events","prev":3,"last":5,"count":2,')


def test_a_replayed_frame_says_so_and_an_unknown_prev_is_null():
    frame = json.loads(frames.events_frame([{"id": 8, "line": "x"}, {"id": 9, "line": "y"}], prev=None, replay=True))
    assert (frame["prev"], frame["last"], frame["count"], frame["replay"]) == (None, 9, 2, True)
    assert "replay" not in json.loads(frames.events_frame([{"id": 8}], prev=7))


def test_a_large_batch_becomes_frames_that_chain_by_prev_and_hold_every_event_once(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(frames, "FRAME_EVENTS", 2)
    made = frames.live_frames([line(pk) for pk in range(11, 16)], prev=10)
    assert [(f["prev"], f["first"], f["last"]) for f in made] == [(10, 11, 12), (12, 13, 14), (14, 15, 15)]
    decoded = [json.loads(f["text"]) for f in made]
    assert [(d["prev"], d["last"]) for d in decoded] == [(f["prev"], f["last"]) for f in made]
    assert [e["id"] for d in decoded for e in d["events"]] == [11, 12, 13, 14, 15]

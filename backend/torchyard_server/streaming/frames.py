"""The `events` frame a job stream sends, written once and forwarded as text.

`{"type": "events", "prev": P, "last": L, "count": N, "events": [...]}`, the header first: `last` is
the id of its last event, `prev` the id of the job's event before its first (null when unknown), so
a client whose cursor is below `prev` knows it missed events (resume with ?after=<cursor>). Ingest
writes the live frames once per batch for every client of the job (consumers forward the text
without decoding it), from each event's JSON (event_text); replayed frames add `"replay": true`.
"""

from __future__ import annotations

from typing import Any

from . import jsontext

# Events per frame: a client's message stays ~100-200 KB however large ingest's batch was.
FRAME_EVENTS = 1000
_encode = jsontext.encode


def _number(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def event_text(payload_json: str, *, pk: int, job_id: int, node_id: int | None, node_rank: int | None,
               rank: int | None, attempt: int, seq: int | None, type: str, ts: str) -> str:
    """JobEvent.as_message as JSON, from its payload's JSON (an object without an "id" key): the
    envelope's fields appended to it, not the whole event encoded again. `type` is one of the
    stored event types and `ts` an ISO 8601 time: neither needs escaping."""
    head = payload_json[:-1] + ("," if len(payload_json) > 2 else "")
    return (f'{head}"id":{pk},"job":{job_id},"node":{_number(node_id)},"node_rank":{_number(node_rank)},'
            f'"rank":{_number(rank)},"attempt":{attempt},"seq":{_number(seq)},"type":"{type}","ts":"{ts}"}}')


def frame_text(texts: list[str], *, prev: int | None, last: int, replay: bool = False) -> str:
    """A frame of events already in JSON (event_text), in id order; `last` is the last one's id."""
    flag = ',"replay":true' if replay else ""
    return (f'{{"type":"events","prev":{_number(prev)},"last":{last},"count":{len(texts)}{flag},'
            f'"events":[{",".join(texts)}]}}')


def events_frame(events: list[dict[str, Any]], *, prev: int | None, replay: bool = False) -> str:
    """A frame of events as dicts (JobEvent.as_message), in id order."""
    return frame_text([_encode(e) for e in events], prev=prev, last=events[-1]["id"], replay=replay)


def live_frames(events: list[tuple[int, str]], *, prev: int | None) -> list[dict[str, Any]]:
    """One batch of a job's events, (id, JSON) in id order, as the frames of its group message: each
    with its `prev`, `first` and `last` (what a consumer checks against its cursor) and its text."""
    frames = []
    for start in range(0, len(events), FRAME_EVENTS):
        chunk = events[start:start + FRAME_EVENTS]
        first, last = chunk[0][0], chunk[-1][0]
        frames.append({"prev": prev, "first": first, "last": last,
                       "text": frame_text([text for _, text in chunk], prev=prev, last=last)})
        prev = last
    return frames

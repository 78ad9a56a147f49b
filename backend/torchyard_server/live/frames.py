"""The `events` frame a job stream sends, written once and forwarded as text.

`{"type": "events", "prev": P, "last": L, "count": N, "events": [...]}`, the header first: `last` is
the id of its last event, `prev` the id of the job's event before its first (null when unknown), so
a client whose cursor is below `prev` knows it missed events (resume with ?after=<cursor>). Ingest
writes the live frames once per batch for every client of the job (consumers forward the text
without decoding it), from each event's JSON (jsontext.event_text); replayed frames add `"replay": true`.
"""

from __future__ import annotations

from typing import TypedDict

from torchyard import stream_contract as contract

from ..streaming import jsontext

# Events per frame: a client's message stays ~100-200 KB however large ingest's batch was.
FRAME_EVENTS = 1000
_encode = jsontext.encode
_number = jsontext.number


def frame_text(texts: list[str], *, prev: int | None, last: int, replay: bool = False) -> str:
    """A frame of events already in JSON (jsontext.event_text), in id order; `last` is the last one's id."""
    flag = ',"replay":true' if replay else ""
    return (f'{{"type":"events","prev":{_number(prev)},"last":{last},"count":{len(texts)}{flag},'
            f'"events":[{",".join(texts)}]}}')


def events_frame(events: list[contract.JobEvent], *, prev: int | None, replay: bool = False) -> str:
    """A frame of events as dicts (JobEvent.as_message), in id order."""
    return frame_text([_encode(e) for e in events], prev=prev, last=events[-1]["id"], replay=replay)


class LiveFrame(TypedDict):
    """A frame of a job's group message: its events' `prev`, `first` and `last` ids (what a consumer
    checks against its cursor) and the frame's JSON, written once for every consumer."""

    prev: int | None
    first: int
    last: int
    text: str


def live_frames(events: list[tuple[int, str]], *, prev: int | None) -> list[LiveFrame]:
    """One batch of a job's events, (id, JSON) in id order, as the frames of its group message: each
    with its `prev`, `first` and `last` (what a consumer checks against its cursor) and its text."""
    frames: list[LiveFrame] = []
    for start in range(0, len(events), FRAME_EVENTS):
        chunk = events[start:start + FRAME_EVENTS]
        first, last = chunk[0][0], chunk[-1][0]
        frames.append({"prev": prev, "first": first, "last": last,
                       "text": frame_text([text for _, text in chunk], prev=prev, last=last)})
        prev = last
    return frames

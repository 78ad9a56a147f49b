"""JSON text on the event path, with orjson: every event is encoded once for the COPY and its frames
(bulk.StoredEvent) and every replayed one decoded and encoded again, so this is the web process's
and ingest's most repeated work; orjson does it several times faster than the standard library.

The text is compact (the frames' `"line":"..."` is what clients such as the stream bench match) and
may hold UTF-8 where the standard encoder wrote \\u escapes: the same JSON. A value orjson refuses
(an integer beyond 64 bits, a non-string key) falls back to protocol.encode_json, so nothing that
was stored before is refused now.
"""

from __future__ import annotations

from typing import Any

import orjson
from torchyard import protocol

decode = orjson.loads


def encode(value: Any) -> str:
    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:  # orjson.JSONEncodeError is one
        return protocol.encode_json(value)


def number(value: int | None) -> str:
    return "null" if value is None else str(int(value))


def event_text(payload_json: str, *, pk: int, job_id: int, node_id: int | None, node_rank: int | None,
               rank: int | None, attempt: int, seq: int | None, type: str, ts: str) -> str:
    """JobEvent.as_message as JSON, from its payload's JSON (an object without an "id" key): the
    envelope's fields appended to it, not the whole event encoded again. `type` is one of the
    stored event types and `ts` an ISO 8601 time: neither needs escaping."""
    head = payload_json[:-1] + ("," if len(payload_json) > 2 else "")
    return (f'{head}"id":{pk},"job":{job_id},"node":{number(node_id)},"node_rank":{number(node_rank)},'
            f'"rank":{number(rank)},"attempt":{attempt},"seq":{number(seq)},"type":"{type}","ts":"{ts}"}}')

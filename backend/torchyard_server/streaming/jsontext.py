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

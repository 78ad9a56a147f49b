"""How many bytes the server holds for a client that has not read them yet (a WebSocket, or a
streamed HTTP response such as the SSE log stream).

An ASGI application cannot see that: `send` returns at once and the server buffers whatever the
client is too slow to take. Under daphne the outermost `send` is `partial(server.handle_reply,
protocol)`, whose Twisted transport keeps that buffer, so SendBacklogProbe (the outermost
middleware of both protocols, asgi.py) puts a function that reads its size into the scope. Under another server,
or behind TLS terminated in the same process, there is no probe and send_backlog() answers 0:
then only the channel layer's bounded queues limit what waits for a slow client.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

SCOPE_KEY = "torchyard.send_backlog"
# What the server may hold for one client before a stream stops sending to it (WebSocket and SSE).
SEND_BACKLOG_LIMIT = 4 << 20
DRAIN_POLL_S = 0.05


def _transport_of(send: Any) -> Any:
    protocol = send.args[0] if isinstance(send, functools.partial) and send.args else None
    transport = getattr(protocol, "transport", None)
    # twisted.internet.abstract.FileDescriptor: dataBuffer[offset:] and _tempDataBuffer wait to be sent.
    if all(hasattr(transport, name) for name in ("dataBuffer", "offset", "_tempDataLen")):
        return transport
    return None


def _buffered(transport: Any) -> int:
    return len(transport.dataBuffer) - transport.offset + transport._tempDataLen


class SendBacklogProbe:
    def __init__(self, inner: Callable[..., Any]) -> None:
        self.inner = inner

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        transport = _transport_of(send)
        if transport is not None:
            scope = {**scope, SCOPE_KEY: functools.partial(_buffered, transport)}
        return await self.inner(scope, receive, send)


def send_backlog(scope: dict[str, Any]) -> int:
    """Bytes written to this connection that its client has not taken yet (0 when unknown)."""
    probe = scope.get(SCOPE_KEY)
    return probe() if probe is not None else 0


async def drained(backlog: Callable[[], int], *, below: int = SEND_BACKLOG_LIMIT // 2) -> None:
    """Until the client has taken all but `below` bytes of what it was sent."""
    while backlog() > below:
        await asyncio.sleep(DRAIN_POLL_S)

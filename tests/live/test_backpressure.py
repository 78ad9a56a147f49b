"""What a stream knows of a slow client (live/backpressure.py): the backlog the probe put in the
scope (none outside daphne), and `drained` waiting until the client has taken most of it."""

from __future__ import annotations

import asyncio

from torchyard_server.live import backpressure
from torchyard_server.live.backpressure import SCOPE_KEY, SendBacklogProbe, drained, send_backlog


def test_without_a_probe_the_backlog_is_zero_and_with_one_it_is_what_the_probe_reads():
    assert send_backlog({"type": "websocket"}) == 0
    assert send_backlog({"type": "websocket", SCOPE_KEY: lambda: 1234}) == 1234


async def test_a_send_that_is_not_daphnes_leaves_the_scope_without_a_probe():
    seen = []

    async def inner(scope, receive, send):
        seen.append(scope)

    async def send(message):
        pass

    await SendBacklogProbe(inner)({"type": "http"}, None, send)
    assert seen == [{"type": "http"}]


async def test_drained_returns_once_the_backlog_is_at_most_the_bound(monkeypatch):
    monkeypatch.setattr(backpressure, "DRAIN_POLL_S", 0.001)
    backlog = iter([5000, 3000, 1500, 900, 0])
    reads = []

    def read() -> int:
        reads.append(next(backlog))
        return reads[-1]

    await asyncio.wait_for(drained(read, below=1000), timeout=5)
    assert reads == [5000, 3000, 1500, 900]

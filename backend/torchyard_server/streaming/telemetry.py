"""Numbers that live in other processes than the one answering /metrics, kept in small Redis keys.

The ingest loop runs in a process of its own and WebSocket clients are held by daphne's (one or
several): each writes what it knows to Redis at a steady pace, and the web process's /metrics view
(web/metrics.py) reads it back. Nothing here is on the hot path: the ingest adds to in-memory
counters per batch and writes them once a second; a web process writes its connection counts every
few seconds, as a field of its own in one hash, so a process that died without saying so drops out
once its field is stale (no counter left too high forever, as INCR/DECR would after a kill -9).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
from collections import Counter
from typing import Any

import redis
from django.conf import settings

log = logging.getLogger(__name__)

INGEST_KEY = "torchyard:telemetry:ingest"
WEBSOCKETS_KEY = "torchyard:telemetry:websockets"
INGEST_REPORT_EVERY = 1.0
WEBSOCKETS_REPORT_EVERY = 5.0
# A web process's counts older than this are dropped: it stopped without taking them back.
WEBSOCKETS_STALE_AFTER = 3 * WEBSOCKETS_REPORT_EVERY
STREAM_KINDS = ("events", "liveness")
WEBSOCKET_KINDS = ("job", "cluster")


def _entry_ms(entry_id: Any) -> int:
    """A Redis stream entry id is `<ms>-<seq>`: the Redis server's clock when it was added."""
    return int((entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)).partition("-")[0])


class IngestStats:
    """What the ingest loop applied, per kind of stream ("events" or "liveness"): entries, as
    counters kept across restarts (HINCRBY), and the longest wait of an entry applied since the
    last report (its entry id's time to the moment its batch committed, on Redis's clock)."""

    def __init__(self, every: float = INGEST_REPORT_EVERY) -> None:
        self.every = every
        self.entries: Counter[str] = Counter()
        self.lag_ms: dict[str, float] = {}
        self._offset_ms = 0.0  # Redis's clock minus ours, measured at every report
        self._last_report = 0.0

    def record(self, kind: str, entry_ids: list[Any]) -> None:
        if not entry_ids:
            return
        self.entries[kind] += len(entry_ids)
        waited = time.time() * 1000 + self._offset_ms - min(_entry_ms(e) for e in entry_ids)
        self.lag_ms[kind] = max(self.lag_ms.get(kind, 0.0), waited)

    def report(self, client: redis.Redis, *, force: bool = False) -> bool:
        """Write the counters and lags once per `every` seconds (or now, with force)."""
        if not force and time.monotonic() - self._last_report < self.every:
            return False
        self._last_report = time.monotonic()
        try:
            seconds, micros = client.time()
            self._offset_ms = seconds * 1000 + micros / 1000 - time.time() * 1000
            pipe = client.pipeline(transaction=False)
            for kind in STREAM_KINDS:
                if self.entries[kind]:
                    pipe.hincrby(INGEST_KEY, f"entries:{kind}", self.entries[kind])
            pipe.hset(INGEST_KEY, mapping={
                **{f"lag:{kind}": f"{max(self.lag_ms.get(kind, 0.0), 0.0) / 1000:.6f}" for kind in STREAM_KINDS},
                "reported_at": f"{seconds + micros / 1e6:.6f}",
            })
            pipe.execute()
        except redis.RedisError as exc:  # kept for the next report: the counts are not lost
            log.warning("ingest: could not report telemetry: %s", exc)
            return False
        self.entries.clear()
        self.lag_ms.clear()
        return True


def ingest_report(client: redis.Redis) -> dict[str, float]:
    """The ingest's last report: entries:<kind>, lag:<kind> and age (seconds since it was written,
    on Redis's clock; absent when the ingest never reported)."""
    raw = client.hgetall(INGEST_KEY)
    seconds, micros = client.time()
    values = {(k.decode() if isinstance(k, bytes) else k): float(v) for k, v in raw.items()}
    reported = values.pop("reported_at", None)
    if reported is not None:
        values["age"] = max(seconds + micros / 1e6 - reported, 0.0)
    return values


class WebSocketCounter:
    """This process's open WebSocket connections by stream kind, written to Redis every
    WEBSOCKETS_REPORT_EVERY by a task on the process's event loop (started by the first client)."""

    def __init__(self) -> None:
        self.open: Counter[str] = Counter()
        self.field = f"{socket.gethostname()}:{os.getpid()}"
        self._task: asyncio.Task | None = None

    def opened(self, consumer: Any, kind: str) -> None:
        """Count an accepted connection (once, however often it is called for one consumer)."""
        if getattr(consumer, "_telemetry_kind", None) is None:
            consumer._telemetry_kind = kind
            self.open[kind] += 1
        self._ensure_reporting()

    def closed(self, consumer: Any) -> None:
        kind = getattr(consumer, "_telemetry_kind", None)
        if kind is not None:
            consumer._telemetry_kind = None
            self.open[kind] -= 1

    def snapshot(self) -> str:
        return json.dumps({"ts": time.time(), **{kind: self.open[kind] for kind in WEBSOCKET_KINDS}})

    async def report(self, client: Any) -> None:
        await client.hset(WEBSOCKETS_KEY, self.field, self.snapshot())

    def _ensure_reporting(self) -> None:
        loop = asyncio.get_running_loop()
        if self._task is None or self._task.done() or self._task.get_loop() is not loop:
            self._task = loop.create_task(self._report_forever())

    async def _report_forever(self) -> None:
        import redis.asyncio as aioredis

        client = aioredis.Redis.from_url(settings.REDIS_URL, socket_timeout=10, socket_connect_timeout=5)
        try:
            while True:
                try:
                    await self.report(client)
                except redis.RedisError as exc:
                    log.warning("websocket telemetry: %s", exc)
                await asyncio.sleep(WEBSOCKETS_REPORT_EVERY)
        finally:
            with contextlib.suppress(Exception):
                await client.aclose()


WEBSOCKETS = WebSocketCounter()


def websocket_clients(client: redis.Redis) -> dict[str, int]:
    """Open WebSocket connections by stream kind, over every web process that reported lately;
    the fields of processes gone quiet are removed."""
    totals = dict.fromkeys(WEBSOCKET_KINDS, 0)
    stale = []
    now = time.time()
    for field, raw in client.hgetall(WEBSOCKETS_KEY).items():
        try:
            counts = json.loads(raw)
            fresh = now - float(counts["ts"]) <= WEBSOCKETS_STALE_AFTER
        except (ValueError, KeyError, TypeError):
            fresh = False
        if not fresh:
            stale.append(field)
            continue
        for kind in WEBSOCKET_KINDS:
            totals[kind] += int(counts.get(kind) or 0)
    if stale:
        client.hdel(WEBSOCKETS_KEY, *stale)
    return totals

"""Publish events of one node to its machine's Redis event stream, batched, buffered while Redis is away.

Every event gets the envelope (stream_contract.EventEnvelope) of its node;
`seq` counts from 1 per supervisor run and is never reused, so the controller's ingest (idempotent by
(node, seq)) can drop the duplicates a retried pipeline may produce. A flush packs its events into
few stream entries (protocol.pack_events).

Flow control, so a node whose ranks print faster than the event path stores loses nothing and no
process grows: the publisher stops adding while its machine's stream holds STREAM_HIGH_WATER
unread entries (ingest deletes what it has stored, so XLEN is the backlog) and goes on below
STREAM_LOW_WATER; the supervisor reads its ranks' files only while the buffer has `room`, so a
flood waits in those files, on disk, instead of in memory. The publisher waits only while ingest
reads the stream (its consumer group is there): with no reader it would wait forever.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections import Counter, deque
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from torchyard import protocol
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import STORED_APART, JobEvent

log = logging.getLogger(__name__)

# What a node publishes: the stream contract's events, and its heartbeats.
NodeEvent = JobEvent | protocol.NodeHeartbeat
DEFAULT_MAX_BUFFER = 50_000
# The supervisor reads rank output only while fewer events than this wait here (`room`): far enough
# below DEFAULT_MAX_BUFFER that log lines are never shed for a flood, only for a Redis away too long.
READ_AHEAD = 20_000
BATCH_SIZE = 2_000
# Unread entries of the machine's event stream (packed: up to protocol.PACKED_MAX_EVENTS each)
# above which the publisher waits, and below which it goes on.
STREAM_HIGH_WATER = 400
STREAM_LOW_WATER = 200
GROUP_CHECK_S = 10.0
# Short timeouts keep one monitor iteration short while Redis is unreachable.
SOCKET_TIMEOUT_S = 2.0
CONNECT_TIMEOUT_S = 1.0
RETRY_BACKOFF_S = (0.5, 1.0, 2.0, 5.0)
# Shed to this fraction of the buffer at once, so shedding is not paid on every emit.
SHED_TO = 0.9
# Cheapest to lose first: resource samples are stale once newer ones exist; then log lines; a state
# event is never dropped. (Heartbeats are not buffered: only the newest is kept.)
_SHED_ORDER = (
    frozenset({protocol.RESOURCE}),
    frozenset({protocol.LOG}),
    frozenset(set(protocol.EVENT_TYPES) - {protocol.STATE}),
)


def streams_of(launch: NodeLaunch) -> tuple[str, str]:
    """The (event, liveness) streams a node publishes to: its machine's own, named by the machine
    token. A launch without one (a supervisor run by hand, the workers' tests) uses the shared
    streams, which only the controller may write where Redis has per-agent users."""
    try:
        machine_id, _ = protocol.parse_machine_token(launch.machine_token)
    except ValueError:
        return protocol.EVENT_STREAM, protocol.LIVENESS_STREAM
    return protocol.machine_event_stream(machine_id), protocol.machine_liveness_stream(machine_id)


def connect(redis_url: str) -> redis.Redis:
    """A client that fails fast instead of retrying: the publisher does its own retries."""
    return redis.Redis.from_url(
        redis_url,
        socket_timeout=SOCKET_TIMEOUT_S,
        socket_connect_timeout=CONNECT_TIMEOUT_S,
        retry=Retry(NoBackoff(), 0),
        health_check_interval=0,
    )


class EventPublisher:
    """Builds events for one node and XADDs them to its machine's event stream in pipelined batches;
    its newest heartbeat to the machine's liveness stream, ahead of them (streams_of)."""

    def __init__(
        self,
        launch: NodeLaunch,
        client: redis.Redis | None,
        *,
        max_buffer: int = DEFAULT_MAX_BUFFER,
        batch_size: int = BATCH_SIZE,
    ) -> None:
        self.launch = launch
        self.client = client
        self.event_stream, self.liveness_stream = streams_of(launch)
        self.max_buffer = max_buffer
        self.read_ahead = min(READ_AHEAD, max_buffer)
        self.batch_size = batch_size
        self.published = 0
        self.dropped: Counter[str] = Counter()
        self.last_error: str | None = None
        self._buffer: deque[NodeEvent] = deque()
        # Only the newest heartbeat is worth sending; it goes to the liveness stream ahead of the
        # buffer, so a flood of log lines never delays it.
        self._beat: NodeEvent | None = None
        self._seq = 0
        self._failures = 0
        self._retry_at = 0.0
        # Waiting for ingest to work the stream's backlog down (flow control, module docstring).
        self._held = False
        self._may_measure = True
        self._read_by_ingest = False
        self._group_checked_at = -GROUP_CHECK_S
        self.held_count = 0

    @property
    def pending(self) -> int:
        return len(self._buffer) + (self._beat is not None)

    @property
    def room(self) -> int:
        """How many more events a reader of rank output should hand over now (flow control)."""
        return max(0, self.read_ahead - len(self._buffer))

    def emit(self, event: NodeEvent, *, rank: int | None = None, ts: float | None = None) -> NodeEvent:
        """Queue one event (one of the stream contract's, or a heartbeat) under this node's envelope,
        which replaces whatever envelope it carries. A heartbeat replaces the one not yet sent and
        takes no `seq`: persisted events stay numbered without gaps."""
        beat = event["type"] == protocol.HEARTBEAT
        if not beat:
            self._seq += 1
        stamped: dict[str, object] = {
            "type": event["type"],
            "job": self.launch.job_id,
            "attempt": self.launch.attempt,
            "node": self.launch.node_id,
            "node_rank": self.launch.node_rank,
            "rank": rank,
            "seq": None if beat else self._seq,
            "ts": time.time() if ts is None else ts,
        }
        stamped.update((key, value) for key, value in event.items() if key not in STORED_APART)
        queued = cast("NodeEvent", stamped)  # the event given, its envelope this node's
        if beat:
            self._beat = queued
            return queued
        self._buffer.append(queued)
        if len(self._buffer) > self.max_buffer:
            self._shed()
        return queued

    def _shed(self) -> None:
        excess = len(self._buffer) - int(self.max_buffer * SHED_TO)
        for droppable in _SHED_ORDER:
            if excess <= 0:
                return
            kept: deque[NodeEvent] = deque()
            for event in self._buffer:  # oldest first
                if excess > 0 and event["type"] in droppable:
                    excess -= 1
                    self.dropped[event["type"]] += 1
                else:
                    kept.append(event)
            self._buffer = kept
        if excess > 0:
            log.warning("event buffer holds %d state events", len(self._buffer))

    def flush(self, budget_s: float = 0.5) -> bool:
        """Send buffered events for up to budget_s; True when the buffer is empty afterwards.

        Never raises for Redis trouble: failed batches stay buffered and are retried after a backoff.
        """
        if not self._buffer and self._beat is None:
            return True
        if self.client is None or time.monotonic() < self._retry_at:
            return False
        if self._beat is not None:
            try:
                self.client.xadd(self.liveness_stream, protocol.encode_event(self._beat),
                                 maxlen=protocol.LIVENESS_STREAM_MAXLEN, approximate=True)
            except (redis.RedisError, OSError) as exc:
                self._on_failure(exc)
                return False
            self._beat = None
            self.published += 1
        deadline = time.monotonic() + budget_s
        while self._buffer and time.monotonic() < deadline:
            try:
                if self._held and self._stream_backlog() > STREAM_LOW_WATER:
                    return False
                self._held = False
                batch = [self._buffer[i] for i in range(min(self.batch_size, len(self._buffer)))]
                backlog = self._send(batch)
            except (redis.RedisError, OSError) as exc:
                self._on_failure(exc)
                return False
            for _ in batch:
                self._buffer.popleft()
            self.published += len(batch)
            if self._failures:
                log.info("redis reachable again; %d events pending", len(self._buffer))
            self._failures = 0
            if backlog >= STREAM_HIGH_WATER:
                self._held = True
                self.held_count += 1
        return not self._buffer

    def _send(self, batch: list[NodeEvent]) -> int:
        """XADD the batch, packed, in one round trip (with XLEN while ingest reads the stream);
        the stream's backlog after it, 0 when not measured."""
        measure = self._flow_control()
        pipe = self.client.pipeline(transaction=False)  # type: ignore[union-attr]
        for _, fields in protocol.pack_events(batch):
            pipe.xadd(self.event_stream, fields, maxlen=protocol.EVENT_STREAM_MAXLEN, approximate=True)
        if measure:
            pipe.xlen(self.event_stream)
        replies = pipe.execute(raise_on_error=False)
        for reply in replies[:-1] if measure else replies:
            if isinstance(reply, Exception):
                raise reply
        return self._backlog_of(replies[-1]) if measure else 0

    def _stream_backlog(self) -> int:
        if not self._flow_control():
            return 0
        try:
            return self._backlog_of(self.client.xlen(self.event_stream))  # type: ignore[union-attr]
        except redis.ResponseError as exc:
            return self._backlog_of(exc)

    def _flow_control(self) -> bool:
        """Whether to wait for ingest: only while it reads this stream (its consumer group exists,
        looked at every GROUP_CHECK_S). A supervisor run by hand, or a test's, has no reader to
        wait for; and a Redis user not allowed XLEN and XINFO turns flow control off (said once)."""
        if not self._may_measure:
            return False
        now = time.monotonic()
        if now >= self._group_checked_at + GROUP_CHECK_S:
            self._group_checked_at = now
            try:
                groups = self.client.xinfo_groups(self.event_stream)  # type: ignore[union-attr]
            except redis.ResponseError as exc:
                self._read_by_ingest = False
                if "no such key" not in str(exc).lower():
                    self._no_flow_control(exc)
                return False
            names = {g["name"].decode() if isinstance(g["name"], bytes) else g["name"] for g in groups}
            self._read_by_ingest = protocol.EVENT_GROUP in names
        return self._read_by_ingest

    def _backlog_of(self, reply: Any) -> int:
        if isinstance(reply, redis.ResponseError):
            self._no_flow_control(reply)
            return 0
        if isinstance(reply, Exception):
            raise reply
        return int(reply)

    def _no_flow_control(self, reason: Exception) -> None:
        self._may_measure = self._held = False
        log.warning("cannot read the backlog of %s (%s): publishing without flow control", self.event_stream, reason)

    def _on_failure(self, exc: Exception) -> None:
        delay = RETRY_BACKOFF_S[min(self._failures, len(RETRY_BACKOFF_S) - 1)]
        self._failures += 1
        self._retry_at = time.monotonic() + delay
        self.last_error = f"{type(exc).__name__}: {exc}"
        if self._failures == 1 or self._failures % 20 == 0:
            log.warning("cannot publish %d events (%s); retrying", len(self._buffer), self.last_error)
        # A half-read reply must not poison the next attempt; best effort on a broken connection.
        if self.client is not None:
            with contextlib.suppress(Exception):
                self.client.connection_pool.disconnect()

    def drain(self, timeout_s: float = 30.0) -> bool:
        """Retry until every buffered event is sent or timeout_s passes; True when all were sent."""
        deadline = time.monotonic() + timeout_s
        while True:
            if self.flush(budget_s=max(0.1, deadline - time.monotonic())):
                return True
            if time.monotonic() >= deadline or self.client is None:
                return False
            # Retry sooner than the steady-state backoff: this is the last chance to deliver.
            self._retry_at = min(self._retry_at, time.monotonic() + 0.5)
            time.sleep(max(0.0, min(self._retry_at, deadline) - time.monotonic()))

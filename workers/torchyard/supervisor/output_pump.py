"""The output pump: everything a node's processes say, turned into events.

Rank log files (per rank, stdout and stderr), torchrun's own log, a Ray node's logs and the SDK's
datagrams are read here, every line masked for the job's secrets, and handed to the publisher. The
newest lines of each kind are kept, so that a failure can quote what explains it.
"""

from __future__ import annotations

import logging
import re
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any, cast

from torchyard import protocol
from torchyard.stream_contract import CheckpointEvent, LogEvent, LogLine, MetricEvent

from .event_socket import EventSocket
from .publisher import EventPublisher
from .ray_logs import RayLogs
from .tail import FileTail, RankLogTailer

log = logging.getLogger(__name__)

# Event types the SDK may send over the socket; state, heartbeat and resource belong to the supervisor.
SDK_EVENT_TYPES = frozenset({protocol.METRIC, protocol.CHECKPOINT, protocol.LOG})

SECRET_MASK = "***"


def secret_masker(secrets: Mapping[str, str]) -> Callable[[str], str]:
    """A function that replaces every secret value in a line with ***: each line of a multi-line
    value too (logs arrive line by line), and its stripped form; the longest first, so a secret
    that holds another is masked whole."""
    values = {piece for value in secrets.values() for line in [value, *value.splitlines()]
              for piece in (line, line.strip()) if piece.strip()}
    if not values:
        return lambda line: line
    pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True)))
    return lambda line: pattern.sub(SECRET_MASK, line)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


class OutputPump:
    """Reads the node's local sources and publishes them. The sources are attached when the ranks
    start (`attach`); before that only the supervisor's and the preparation's own lines flow.

    `on_torchrun_line(line)` sees each torchrun line (the supervisor notes a failed worker there) and
    `on_step(rank, step, total)` each rank's metric step (stall watch)."""

    def __init__(self, publisher: EventPublisher, mask: Callable[[str], str], *, rank_start: int, keep: int,
                 on_torchrun_line: Callable[[str], None], on_step: Callable[[int, int, int | None], None]) -> None:
        self.publisher = publisher
        self.mask = mask
        self._rank_start = rank_start
        self._on_torchrun_line = on_torchrun_line
        self._on_step = on_step
        self.tailer: RankLogTailer | None = None
        self._torchrun_tail: FileTail | None = None
        self._ray_logs: RayLogs | None = None
        self._socket: EventSocket | None = None
        self.last_line: dict[int, str] = {}  # global rank -> its newest log line
        self.heard_at: dict[int, float] = {}  # global rank -> when it last printed or reported (monotonic)
        self.recent: dict[str, deque[LogLine]] = {
            kind: deque(maxlen=keep) for kind in ("prepare", "stderr", "stdout", "torchrun")}

    def attach(self, *, tailer: RankLogTailer, socket: EventSocket, torchrun_tail: FileTail | None,
               ray_logs: RayLogs | None) -> None:
        self.tailer, self._socket, self._torchrun_tail, self._ray_logs = tailer, socket, torchrun_tail, ray_logs

    # --- lines of our own --------------------------------------------------------------------------
    def supervisor_line(self, line: str) -> None:
        line = self.mask(line)
        log.info(line)
        self.publisher.emit({"type": protocol.LOG, "stream": "stderr", "line": line, "source": "supervisor"})

    def prepare_line(self, line: str, source: str = "prepare") -> None:
        line = self.mask(line)
        self.recent["prepare"].append({"rank": None, "stream": "stdout", "line": line})
        self.publisher.emit({"type": protocol.LOG, "stream": "stdout", "line": line, "source": source})

    # --- the processes' ----------------------------------------------------------------------------
    def drain(self, final: bool = False) -> None:
        """Turn new log lines and SDK datagrams into events (not yet sent)."""
        if self.tailer is not None:
            for item in self.tailer.poll(final=final, max_lines=self.publisher.room):
                rank = self._rank_start + item.local_rank
                line = self.mask(item.line)
                self.recent[item.stream].append({"rank": rank, "stream": item.stream, "line": line})
                self.last_line[rank] = line
                self.heard_at[rank] = time.monotonic()
                self.publisher.emit({"type": protocol.LOG, "stream": item.stream, "line": line,
                                     "local_rank": item.local_rank, "source": "worker"}, rank=rank)
        if self._torchrun_tail is not None:
            for line in map(self.mask, self._torchrun_tail.read_lines(final=final)):
                self.recent["torchrun"].append({"rank": None, "stream": "stderr", "line": line})
                self._on_torchrun_line(line)
                self.publisher.emit({"type": protocol.LOG, "stream": "stderr", "line": line, "source": "torchrun"})
        if self._ray_logs is not None:
            for line in map(self.mask, self._ray_logs.poll(final=final)):
                self.publisher.emit({"type": protocol.LOG, "stream": "stderr", "line": line, "source": "ray"})
        if self._socket is not None:
            for event in self._socket.receive():
                self._sdk_event(event)

    def more_to_read(self) -> bool:
        """The ranks' files hold lines that the last read left for want of room, and there is room
        now: read on at once rather than after a poll interval."""
        return self.tailer is not None and not self.tailer.at_end and self.publisher.room > 0

    def _sdk_event(self, event: dict[str, Any]) -> None:
        event_type = event.pop("type")
        if event_type not in SDK_EVENT_TYPES:
            log.warning("ignoring an SDK event of type %r", event_type)
            return
        rank = event.pop("rank", None)
        rank = rank if isinstance(rank, int) and not isinstance(rank, bool) else None
        ts = event.pop("ts", None)
        if rank is not None:
            self.heard_at[rank] = time.monotonic()
        step = event.get("step")
        if event_type == protocol.METRIC and rank is not None and isinstance(step, int) and not isinstance(step, bool):
            total = event.get("total_steps")
            self._on_step(rank, step, total if isinstance(total, int) and not isinstance(total, bool) else None)
        # Our SDK's events (sdk/events.py), of the types it may send: forwarded as they came.
        sdk_event = cast("MetricEvent | CheckpointEvent | LogEvent", {"type": event_type, **event})
        self.publisher.emit(sdk_event, rank=rank, ts=ts if _number(ts) else None)

    def drain_to_the_end(self, *, heartbeat: Callable[[], None], heartbeat_interval: float, give_up_after: float,
                         poll_interval: float) -> None:
        """The ranks are gone: publish every line they left in their files, as fast as the event
        path takes them (the files hold a flood, not this process's memory), beating meanwhile so
        the node is not taken for lost. Gives up when nothing could be sent for `give_up_after` s."""
        progress_at, next_beat = time.monotonic(), 0.0
        while True:
            published = self.publisher.published
            self.drain(final=True)
            if self.tailer is None or self.tailer.at_end:
                return
            now = time.monotonic()
            if now >= next_beat:
                heartbeat()
                next_beat = now + heartbeat_interval
            self.publisher.flush()
            if self.publisher.published > published:
                progress_at = now
            elif now - progress_at > give_up_after:
                log.error("the event path took nothing for %.0f s: the ranks' last lines stay unpublished",
                          give_up_after)
                return
            if self.publisher.room == 0:
                time.sleep(poll_interval)

    def last_lines(self, *, started: bool) -> list[LogLine]:
        """The newest lines that explain a failure: the preparation's when nothing was started, else
        the workers' stderr, else their stdout, else torchrun's."""
        for stream in ("stderr", "stdout", "torchrun") if started else ("prepare",):
            if self.recent[stream]:
                return list(self.recent[stream])
        return []

    def close(self) -> None:
        for source in (self._socket, self.tailer, self._torchrun_tail, self._ray_logs):
            if source is not None:
                source.close()

"""Events from the training script to the node supervisor, never in the way of training.

With TORCHYARD_EVENT_SOCKET set, each event is one JSON datagram sent without blocking to that Unix
socket. A full or absent receiver never stalls a step: the datagram waits in a small in-process queue
that the next call flushes first, and when that queue is full the oldest one is dropped and counted.
Every event sent after a drop carries ``"dropped": <drops so far in this process>``.

Without the variable, report() prints one line ``[torchyard] step=... loss=...`` to the rank's own
output instead.
"""

from __future__ import annotations

import atexit
import collections
import json
import math
import os
import socket
import sys
import threading
import time
from json.encoder import encode_basestring
from typing import Any

from torchyard import protocol
from torchyard.stream_contract import CheckpointEvent, LogEvent, Manifest, MetricEvent

# Linux queues only net.unix.max_dgram_qlen (default 10) datagrams per receiving socket; this covers
# a supervisor that is briefly busy without letting a dead one grow our memory.
MAX_PENDING = 256
# Built once: json.dumps with non-default separators would build a new encoder on every call.
_encode = json.JSONEncoder(separators=(",", ":"), default=str).encode
# What a rank sends its node's supervisor (which forwards them: supervisor/output_pump.py).
SdkEvent = MetricEvent | CheckpointEvent | LogEvent
RESERVED_KEYS = frozenset({"type", "rank", "step", "ts", "dropped"})
# While the receiver is absent, try to reach it at most this often: a failing connect() per report
# would cost a syscall each time for nothing.
RECONNECT_INTERVAL = 0.2
_RECEIVER_GONE = (
    FileNotFoundError,
    ConnectionRefusedError,
    ConnectionResetError,
    BrokenPipeError,
    NotADirectoryError,
)


class EventChannel:
    """One process's sending end of the event socket (or of stdout when there is no socket)."""

    def __init__(self, path: str | None, max_pending: int | None = None) -> None:
        self.path = path or None
        self.pid = os.getpid()
        self.rank = int(os.environ.get("RANK", "0") or 0)
        self.dropped = 0
        self.sent = 0
        self._pending: collections.deque[bytes] = collections.deque()
        self._max_pending = MAX_PENDING if max_pending is None else max_pending
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._connected = False
        self._next_connect = 0.0
        if self.path:
            self._new_socket()

    def _new_socket(self) -> None:
        if self._sock is not None:
            self._sock.close()
        # Connected once, so each send skips resolving the path; non-blocking, so a full receiver
        # costs an EAGAIN instead of a stalled training step.
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self._sock.setblocking(False)
        self._connected = False

    def emit(self, event: SdkEvent, retry_for: float = 0.0) -> bool:
        """Send ``event``; True when it left the process now. ``retry_for`` seconds of retries are
        for rare events that matter (checkpoint commits), never for metrics."""
        if self.path is None:
            print(_format_line(event), flush=True)
            return True
        return self.send_encoded(_encode(event).encode(), retry_for)

    def send_encoded(self, body: bytes, retry_for: float = 0.0) -> bool:
        """Send one JSON object already encoded (``b"{...}"``); see emit()."""
        deadline = time.monotonic() + retry_for if retry_for > 0 else 0.0
        with self._lock:
            if self.dropped:
                body = b'%s,"dropped":%d}' % (body[:-1], self.dropped)
            while True:
                if self._flush_pending() and self._send(body):
                    return True
                if not deadline or time.monotonic() >= deadline:
                    break
                time.sleep(0.005)
            self._enqueue(body)
            return False

    def flush(self, timeout: float = 0.0) -> bool:
        """Try to deliver queued events for up to ``timeout`` seconds; True when none are left."""
        if self.path is None:
            return True
        deadline = time.monotonic() + timeout
        with self._lock:
            while not self._flush_pending():
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.005)
            return True

    @property
    def pending(self) -> int:
        return len(self._pending)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None

    def _connect(self) -> bool:
        now = time.monotonic()
        if self._sock is None or now < self._next_connect:
            return False
        try:
            self._sock.connect(self.path or "")
        except OSError:
            self._next_connect = now + RECONNECT_INTERVAL
            return False
        self._connected = True
        return True

    def _send(self, data: bytes) -> bool:
        if not self._connected and not self._connect():
            return False
        try:
            self._sock.send(data)  # type: ignore[union-attr]
        except (BlockingIOError, InterruptedError):
            return False
        except _RECEIVER_GONE:
            # The supervisor went away or re-created its socket: reach the new one later.
            self._new_socket()
            return False
        except OSError:
            # Too large or otherwise undeliverable: retrying cannot help.
            self.dropped += 1
            return True
        self.sent += 1
        return True

    def _flush_pending(self) -> bool:
        pending = self._pending
        while pending:
            if not self._send(pending[0]):
                return False
            pending.popleft()
        return True

    def _enqueue(self, data: bytes) -> None:
        if len(self._pending) >= self._max_pending:
            self._pending.popleft()
            self.dropped += 1
        self._pending.append(data)


def _format_number(value: Any) -> str:
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _format_line(event: SdkEvent) -> str:
    if event["type"] == protocol.METRIC:
        fields = [f"step={event['step']}"]
        fields += [f"{k}={_format_number(v)}" for k, v in event.items() if k not in RESERVED_KEYS]
    else:
        fields = [f"{event.get('type')}"] + [f"{k}={v}" for k, v in event.items() if k in ("step", "uri")]
    return "[torchyard] " + " ".join(fields)


_channel: EventChannel | None = None
_channel_guard = threading.Lock()


def channel() -> EventChannel:
    """This process's channel, built on first use from TORCHYARD_EVENT_SOCKET."""
    return _channel or reset()


def reset() -> EventChannel:
    """Rebuild the channel from the environment now (after changing TORCHYARD_EVENT_SOCKET)."""
    global _channel
    with _channel_guard:
        old = _channel
        _channel = EventChannel(os.environ.get(protocol.ENV_EVENT_SOCKET) or None)
        if old is not None and old.pid == os.getpid():
            old.close()
        return _channel


def _forget_channel_in_child() -> None:
    # A forked child (a DataLoader worker) must not share the parent's socket, queue and counts.
    global _channel
    _channel = None


os.register_at_fork(after_in_child=_forget_channel_in_child)


def _as_number(value: Any) -> Any:
    kind = type(value)
    if kind is float:
        # Strict JSON (and PostgreSQL jsonb) has no NaN or Infinity: send null instead.
        return value if math.isfinite(value) else None
    if kind is int:
        return value
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value if isinstance(value, int) or math.isfinite(value) else None
    if isinstance(value, bool) or value is None:
        return value
    try:
        number = float(value)  # tensors and numpy scalars
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) else None


_json_keys: dict[str, str] = {}


def _json_key(key: str) -> str:
    encoded = _json_keys.get(key)
    if encoded is None:
        encoded = encode_basestring(key)
        if len(_json_keys) < 1024:
            _json_keys[key] = encoded
    return encoded


def _json_number(value: Any) -> str:
    kind = type(value)
    if kind is float:
        return repr(value) if math.isfinite(value) else "null"
    if kind is int:
        return repr(value)
    return _encode(_as_number(value))


_total_steps: int | None = None
# The last step this process reported: what a rank that raises was at (rank_main.note_error reads it).
_last_step: int | None = None


def set_total_steps(total: int) -> None:
    """Declare how many steps the run will take: the control plane shows progress and an ETA from
    it (whatever the script's arguments are called). It rides on every later ``report()``, so one
    call before the loop is enough; ``report(step=s, total_steps=n)`` does the same."""
    global _total_steps
    total = int(total)
    if total <= 0:
        raise ValueError(f"total_steps must be a positive number of steps, not {total}")
    _total_steps = total


def total_steps() -> int | None:
    """What ``set_total_steps()`` declared in this process, or None."""
    return _total_steps


def report(step: int, **numbers: Any) -> None:
    """Report metrics of one training step (e.g. ``report(step=s, loss=l, throughput=t)``).

    Never blocks: with the event socket, one datagram is sent or queued (and dropped when the queue
    is full); without it, one ``[torchyard] step=... loss=...`` line is printed. Values should be
    numbers; tensors and numpy scalars are converted with float() (which waits for a GPU tensor);
    NaN and infinities are sent as null. Call it every few steps, not every step. Report
    ``samples_per_second`` (or ``throughput`` in samples/s) and the job's summary adds up every
    rank's; ``total_steps=n`` declares the run's length (see set_total_steps()).
    """
    if "total_steps" in numbers:
        set_total_steps(numbers.pop("total_steps"))
    if _total_steps is not None:
        numbers["total_steps"] = _total_steps
    global _last_step
    ch = _channel or reset()
    step = _last_step = int(step)
    if ch.path is None:
        fields = "".join(
            f" {k}={_format_number(_as_number(v))}" for k, v in numbers.items() if k not in RESERVED_KEYS
        )
        print(f"[torchyard] step={step}{fields}", flush=True)
        return
    # Encoded by hand: a few microseconds cheaper per call than the json module for these flat events.
    parts = [f'{{"type":"metric","rank":{ch.rank},"step":{step},"ts":{time.time()!r}']
    for key, value in numbers.items():
        if key not in RESERVED_KEYS:
            parts.append(f",{_json_key(key)}:{_json_number(value)}")
    parts.append("}")
    ch.send_encoded("".join(parts).encode())


def emit_checkpoint(step: int, uri: str, manifest: Manifest) -> bool:
    """Announce a committed checkpoint (rank 0 only); retried briefly because it matters."""
    ch = channel()
    event: CheckpointEvent = {
        "type": protocol.CHECKPOINT,
        "rank": ch.rank,
        "step": int(step),
        "uri": uri,
        "manifest": manifest,
        "ts": time.time(),
    }
    return ch.emit(event, retry_for=1.0)


def dropped_count() -> int:
    """Events this process has dropped so far."""
    return channel().dropped


@atexit.register
def _flush_at_exit() -> None:
    current = _channel
    if (
        current is not None
        and current.pid == os.getpid()
        and current.pending
        and not current.flush(timeout=0.5)
    ):
        print(
            f"[torchyard] warning: {current.pending} events not delivered at exit "
            f"({current.dropped} dropped before)",
            file=sys.stderr,
        )

"""The Unix datagram socket the SDK inside each rank sends its events to (metrics, checkpoints).

One JSON object per datagram, with at least "type" and "rank". Datagrams keep messages whole without
any framing, and a non-blocking receive never stalls the monitor loop.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MAX_DATAGRAM_BYTES = 256 * 1024
# Ask for a large receive queue so a burst of reports between two monitor iterations fits.
RECEIVE_BUFFER_BYTES = 4 * 1024 * 1024
# Bound the work of one monitor iteration; what is left waits in the kernel queue.
MAX_DATAGRAMS_PER_POLL = 10_000


class EventSocket:
    """Bound on construction; `receive()` returns the decoded JSON objects waiting, never blocks."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.rejected = 0
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a stale socket of an earlier run
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RECEIVE_BUFFER_BYTES)
            self._sock.bind(str(self.path))
            # Only this user's processes may report (the short-path fallback lives in shared /tmp).
            os.chmod(self.path, 0o600)
            self._sock.setblocking(False)
        except OSError:
            self._sock.close()
            raise

    def receive(self) -> list[dict[str, Any]]:
        """Every well-formed JSON object waiting on the socket; malformed datagrams are counted."""
        events: list[dict[str, Any]] = []
        for _ in range(MAX_DATAGRAMS_PER_POLL):
            try:
                data = self._sock.recv(MAX_DATAGRAM_BYTES)
            except (BlockingIOError, InterruptedError):
                break
            try:
                event = json.loads(data)
            except ValueError:
                event = None
            if isinstance(event, dict) and isinstance(event.get("type"), str):
                events.append(event)
            else:
                self.rejected += 1
                if self.rejected == 1:
                    log.warning("ignoring a datagram that is not a JSON object with a 'type': %r", data[:200])
        return events

    def close(self) -> None:
        """Close and remove the socket file."""
        self._sock.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()

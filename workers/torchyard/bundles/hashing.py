"""Hashing beside the work: `InOrder` runs a consumer (a digest, a file write) on a thread of its own,
in order, while the caller produces the pieces; `sha256_file` hashes a file whole.
"""

from __future__ import annotations

import contextlib
import hashlib
import queue
import threading
from collections.abc import Callable
from pathlib import Path

CHUNK = 1 << 20


class InOrder:
    """Applies `consume` to each piece given to `put`, on a thread of its own and in order, at most
    `queued` pieces behind: hashing and file writes release the GIL, so they run beside the thread
    that produces the pieces instead of after it. The first failure is kept (later pieces are
    skipped) and raised by the next `put` and by `finish`."""

    def __init__(self, consume: Callable[[bytes], object], *, name: str, queued: int) -> None:
        self.consume = consume
        self.failed: list[BaseException] = []
        self.pending: queue.Queue[bytes | None] = queue.Queue(maxsize=queued)
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while (data := self.pending.get()) is not None:
            if self.failed:
                continue
            try:
                self.consume(data)
            except BaseException as exc:
                self.failed.append(exc)

    def put(self, data: bytes) -> None:
        if self.failed:
            raise self.failed[0]
        self.pending.put(data)

    def finish(self) -> None:
        """Waits for the last piece (call once); raises the thread's failure, if any."""
        self.pending.put(None)
        self.thread.join()
        if self.failed:
            raise self.failed[0]

    def abandon(self) -> None:
        """Ends the thread without waiting for what is queued (a failed or abandoned read)."""
        if self.thread.is_alive():
            with contextlib.suppress(queue.Empty):
                while True:
                    self.pending.get_nowait()
            self.pending.put(None)
            self.thread.join(timeout=2.0)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()

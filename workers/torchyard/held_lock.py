"""A lock a process holds for as long as it lives, on a file that names its holder: one stack per
data directory (torchyard_server/runtime/launcher.py), one test run per set of Redis databases (tests/conftest.py).

flock, not a pid file: the lock goes with its holder's death, however it dies (the descriptor is not
inherited by children), so a crash leaves nothing to clean up. The file is opened without truncating,
so that one who finds it held can read who holds it."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path
from typing import IO


class Held(Exception):
    """The lock is held by another process; `holder` is what its file says (its pid, or "?")."""

    def __init__(self, holder: str) -> None:
        super().__init__(holder)
        self.holder = holder


def hold(path: Path, holder: str | None = None) -> IO[str]:
    """Take the lock on `path` (made if missing) and write `holder` (default: this pid) into it.
    Keep the returned file open for as long as the lock is to be held; raises Held at once when
    another process holds it."""
    handle = open(path, "a+")  # noqa: SIM115 - the caller holds it open: that is the lock
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        found = handle.read().strip() or "?"
        handle.close()
        raise Held(found) from None
    handle.truncate(0)
    handle.write(holder or str(os.getpid()))
    handle.flush()
    return handle

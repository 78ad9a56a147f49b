"""Follow a Ray node's own logs (framework ray) so they stream with the rest of the job's.

Ray writes its daemons' logs under `<temp dir>/session_latest/logs/`, not to the runner's output: a
raylet or GCS that dies, a node health check that fails, a task killed for memory all appear only
there. Their `.out` files log at INFO several lines a second (event stats, resource reports), so
only warnings and worse pass, with the lines that continue them (a multi-line message or a stack);
their `.err` files hold what the process itself printed (a crash's backtrace) and pass whole.
"""

from __future__ import annotations

import re
from pathlib import Path

from .tail import FileTail

# The daemons whose logs a user needs to see a Ray node fail: every node's raylet, the head's GCS.
DAEMONS = ("raylet", "gcs_server")
# Ray's (spdlog) line opening: "[2026-11-25 15:20:01,123 W 4242 4242] (raylet) node_manager.cc:..."
_OPENING = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ([TDIWECF]) \d+ \d+\]")
SHOWN_LEVELS = frozenset("WECF")


class RayLogs:
    """The lines worth showing that a node's Ray daemons wrote since the last poll, each labelled
    with the file it came from ("raylet.err: ..." for a daemon's own output)."""

    def __init__(self, temp_dir: Path) -> None:
        logs = Path(temp_dir) / "session_latest" / "logs"
        self._tails = [(f"{daemon}.{kind}", FileTail(logs / f"{daemon}.{kind}"))
                       for daemon in DAEMONS for kind in ("out", "err")]
        self._showing = {name: False for name, _ in self._tails}  # the last line of a .out passed

    def poll(self, final: bool = False) -> list[str]:
        shown: list[str] = []
        for name, tail in self._tails:
            for line in tail.read_lines(final=final):
                if name.endswith(".err"):
                    if line.strip():
                        shown.append(f"{name}: {line}")
                elif self._passes(name, line):
                    shown.append(line)
        return shown

    def _passes(self, name: str, line: str) -> bool:
        opening = _OPENING.match(line)
        if opening is not None:
            self._showing[name] = opening.group(1) in SHOWN_LEVELS
        return self._showing[name] and bool(line.strip())

    def close(self) -> None:
        for _, tail in self._tails:
            tail.close()

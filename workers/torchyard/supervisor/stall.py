"""Hang and straggler detection for one node's ranks.

A rank that stops making progress without dying (a deadlock, a collective waiting on a peer that
never comes, a process stopped by a signal, a disk that hangs) keeps its node's heartbeats going,
so liveness alone never notices. Every rank's last reported step and the time it advanced are
tracked here; a rank whose step has not advanced for the stall timeout is reported once (until it
advances again) with its Python stack, taken from outside the process by py-spy: no cooperation
from the script is needed, and a stopped process can be read too.

Only ranks that report steps (`sdk.report(step=...)`) can be watched: without steps there is no
notion of progress to lose. A rank that reached the total it declared (`sdk.set_total_steps`) has
finished training: its last evaluation, checkpoint and teardown make no steps, and are not a stall.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import psutil

# The default timeout: 10x the median time between two steps, never under a minute, so that a
# checkpoint save or an evaluation pass is not taken for a hang.
MEDIAN_FACTOR = 10.0
DEFAULT_MIN_TIMEOUT_S = 60.0
MAX_STACK_CHARS = 16_000


@dataclass
class _Rank:
    step: int
    advanced_at: float
    intervals: deque[float] = field(default_factory=lambda: deque(maxlen=64))
    reported: bool = False
    finished: bool = False


@dataclass(frozen=True)
class Stall:
    rank: int
    step: int
    stalled_for: float
    timeout: float


class StallWatch:
    """Per-rank progress; `stalled(now)` returns each rank once when it stops advancing."""

    def __init__(self, timeout: float | None = None) -> None:
        """`timeout` in seconds as the job set it; None for the default (see MEDIAN_FACTOR)."""
        self.explicit_timeout = timeout
        self._ranks: dict[int, _Rank] = {}

    def step(self, rank: int, step: int, now: float, total: int | None = None) -> None:
        """A rank reported `step` at `now` (monotonic seconds), of `total` when it declared one."""
        known = self._ranks.get(rank)
        if known is None:
            known = self._ranks[rank] = _Rank(step=step, advanced_at=now)
        elif step != known.step:
            if step > known.step:
                known.intervals.append((now - known.advanced_at) / (step - known.step))
            # A step going back is a resume from a checkpoint: progress all the same.
            known.step, known.advanced_at, known.reported = step, now, False
        known.finished = total is not None and step >= total

    def timeout(self) -> float:
        if self.explicit_timeout is not None:
            return self.explicit_timeout
        intervals = [i for r in self._ranks.values() for i in r.intervals]
        if not intervals:
            return DEFAULT_MIN_TIMEOUT_S
        return max(DEFAULT_MIN_TIMEOUT_S, MEDIAN_FACTOR * statistics.median(intervals))

    def stalled(self, now: float) -> list[Stall]:
        """Ranks whose step has not advanced for the timeout and were not reported yet."""
        limit = self.timeout()
        found = []
        for rank, known in sorted(self._ranks.items()):
            if not known.reported and not known.finished and now - known.advanced_at >= limit:
                known.reported = True
                found.append(Stall(rank=rank, step=known.step, stalled_for=round(now - known.advanced_at, 1),
                                   timeout=round(limit, 1)))
        return found

    def snapshot(self, now: float) -> dict[str, list[float]]:
        """{rank: [last step, seconds since it advanced]} for heartbeats."""
        return {str(r): [k.step, round(now - k.advanced_at, 1)] for r, k in sorted(self._ranks.items())}


def _py_spy() -> str | None:
    """py-spy from the agent's environment (beside its Python), else from PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def python_stack(pid: int, timeout: float = 10.0) -> str:
    """Every thread's Python stack of a live process, read from outside.

    `--nonblocking` reads the memory without pausing the process (and works on a stopped one,
    which py-spy's default ptrace suspend does not)."""
    tool = _py_spy()
    if tool is None:
        return "(no stack: py-spy is not installed beside the agent)"
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid), "--nonblocking"], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stack: py-spy failed: {exc})"
    text = done.stdout if done.returncode == 0 else f"(no stack: py-spy: {done.stderr.strip()[:500]})"
    return text[-MAX_STACK_CHARS:]


def process_state(pid: int) -> str:
    """psutil's status of the process ("running", "sleeping", "stopped", "disk-sleep" ...)."""
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"

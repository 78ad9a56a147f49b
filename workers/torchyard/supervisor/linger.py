"""Ranks that outlive their job's work: a job whose work is done always ends.

A rank still alive `exit_grace` seconds (JobSpec fault_tolerance.exit_grace, 30 s by default) after
its work is done, and using no CPU, hangs in its teardown: torch's process-group
destructors (torchyard/rank_main.py shows one such deadlock and how Torchyard's own launch avoids
it), a non-daemon thread nobody stops, a `join()` on a process that never ends. Waiting longer
gains nothing and holds the job's machines and the queue behind it: its stack is read (Python and
native frames, py-spy) and kept with the job, it is ended, and the node completes with a warning
that names it and where it hung. A rank that still computes is left alone: finishing later than the
others is not a hang.

A rank's work is done when its script returned 0 (torchyard/rank_main.py leaves
RUN_DIR/returned-<RANK> before it joins non-daemon threads and runs atexit callbacks) and every other
live rank of the node's did too, or when every other rank of the job exited 0, which is read from two
places: this node's own ranks (a rank process seen alive and now gone, while the launcher has named
no failure), and the other nodes, each of which completed (exited 0 as a whole) in the job's
membership (peers.json, which the agent writes for every node of the attempt whenever one starts or
ends). On a node whose launcher is its one process (launcher none or command) the node is the unit:
it lingers when every other node completed. A node's live ranks are ended together or not at all.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from torchyard import protocol
from torchyard.node.proctree import is_alive, kill_process_tree, tree_usage
from torchyard.node.stacks import python_stack, stack_facts

from .stall import IDLE_CPU_SHARE

# A rank idle enough to be hung: at most IDLE_CPU_SHARE of one core over the last IDLE_WINDOW_S.
IDLE_WINDOW_S = 3.0
PEERS_READ_EVERY_S = 0.5


@dataclass(frozen=True)
class Lingered:
    """A rank (None: the node's one process) ended for outliving the job's work."""

    rank: int | None
    pid: int
    after_s: float
    frame: str | None
    stack: str
    returned: bool = False  # its own script had returned 0 (else: every other rank had exited 0)

    def summary(self) -> str:
        who = f"global rank {self.rank}" if self.rank is not None else "the node's process"
        where = f" (hung in {self.frame})" if self.frame else ""
        after = "its script returned 0" if self.returned else "every other rank of the job exited 0"
        return (f"{who} (pid {self.pid}) was still alive {self.after_s:g} s after {after}, using no CPU{where}; "
                "its stack was kept and it was ended")


@dataclass
class _Unit:
    proc: psutil.Process
    since: float | None = None  # when its work was known to be done (its grace started)
    cpu: deque[tuple[float, float]] = field(default_factory=lambda: deque(maxlen=64))


class LingerWatch:
    """Fed the node's rank processes each loop; `check(now)` returns the ranks to end, once each."""

    def __init__(self, grace: float, *, nnodes: int, node_rank: int, local_ranks: int, run_dir: Path) -> None:
        self.grace = grace
        self.nnodes = nnodes
        self.node_rank = node_rank
        self.local_ranks = local_ranks  # how many units this node has (1 for a one-process launcher)
        self.run_dir = Path(run_dir)
        self.peers_file = self.run_dir / protocol.PEERS_FILE
        self._units: dict[int | None, _Unit] = {}
        self._gone: set[int | None] = set()
        self._peers_done = nnodes <= 1
        self._peers_read_at = float("-inf")

    def see(self, rank: int | None, proc: psutil.Process) -> None:
        """A unit's process as found now (a rank's, by its RANK; None for the node's one process)."""
        if rank not in self._units and rank not in self._gone:
            self._units[rank] = _Unit(proc)

    def gone(self, rank: int | None) -> None:
        """A unit found already ended (a warm rank that started and ended between two looks)."""
        if rank not in self._units:
            self._gone.add(rank)

    def alive(self) -> dict[int | None, psutil.Process]:
        """The units seen and not known to have ended."""
        return {rank: unit.proc for rank, unit in self._units.items()}

    def all_seen(self) -> bool:
        return len(self._units) + len(self._gone) >= self.local_ranks

    def _others_done(self, now: float) -> bool:
        if not self._peers_done and now - self._peers_read_at >= PEERS_READ_EVERY_S:
            self._peers_read_at = now
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                nodes = json.loads(self.peers_file.read_text()).get("nodes") or []
                others = [n for n in nodes if int(n.get("node_rank", -1)) != self.node_rank]
                self._peers_done = len(others) == self.nnodes - 1 and all(
                    n.get("status") == protocol.NODE_COMPLETED for n in others)
        return self._peers_done

    def check(self, now: float, *, failed: bool) -> list[tuple[int | None, psutil.Process, float, bool]]:
        """The units to end now: (rank, process, seconds it outlived its work, whether its own script
        had returned 0). `failed`: the launcher named a failure, or the node is being stopped
        (nothing lingers then)."""
        for rank, unit in list(self._units.items()):
            if not is_alive(unit.proc):
                self._gone.add(rank)
                del self._units[rank]
        if failed or not self._units:
            return []
        # The work is done when every unit of this node was seen and those still alive either returned
        # from their script (0) or are all that is left of the job: every other one gone (as exited 0:
        # no failure named) and every other node completed. A one-rank job has nobody to outlive.
        returned = self._returned() if self.all_seen() else set()
        local_done = self.all_seen() and all(rank in returned for rank in self._units)
        others_done = self.all_seen() and self._others_done(now) and bool(self._gone or self.nnodes > 1)
        if not (local_done or others_done):
            for unit in self._units.values():
                unit.since = None
                unit.cpu.clear()
            return []
        due = []
        for rank, unit in self._units.items():
            usage = tree_usage(unit.proc)
            if usage is None:
                continue
            cpu = usage[0]
            unit.cpu.append((now, cpu))
            if unit.since is None:
                unit.since = now
            while len(unit.cpu) > 1 and now - unit.cpu[1][0] >= IDLE_WINDOW_S:
                unit.cpu.popleft()
            first_t, first_cpu = unit.cpu[0]
            idle = now - first_t >= min(IDLE_WINDOW_S, self.grace) * 0.9 and \
                cpu - first_cpu <= IDLE_CPU_SHARE * (now - first_t)
            if now - unit.since >= self.grace and idle:
                due.append((rank, unit.proc, round(now - unit.since, 1), rank in returned))
        if len(due) < len(self._units):
            # Every live unit at once or none: ending one makes torchrun (and the warm launcher) stop
            # the others, and one that still computes may still be doing the job's work.
            return []
        for rank, *_ in due:
            self._gone.add(rank)
            del self._units[rank]
        return due

    def finishing(self, rank: int | None) -> bool:
        """Whether the unit's grace runs: its work is done, what it does now is teardown."""
        unit = self._units.get(rank)
        return unit is not None and unit.since is not None

    def _returned(self) -> set[int | None]:
        """The ranks whose script returned 0 (torchyard/rank_main.py leaves returned-<RANK>)."""
        try:
            names = os.listdir(self.run_dir)
        except OSError:
            return set()
        found: set[int | None] = set()
        for name in names:
            if name.startswith(protocol.RETURNED_PREFIX):
                with contextlib.suppress(ValueError):
                    found.add(int(name.removeprefix(protocol.RETURNED_PREFIX)))
        return found


def end_lingering(rank: int | None, proc: psutil.Process, after_s: float, returned: bool = False,
                  mask: Callable[[str], str] = lambda text: text) -> Lingered:
    """Read the process's stack (Python and native frames), then SIGKILL it and all under it."""
    stack = mask(python_stack(proc.pid, native=True))
    _, frame = stack_facts(stack)
    native = _innermost_native_frame(stack)
    kill_process_tree(proc.pid, sig=signal.SIGKILL)
    return Lingered(rank=rank, pid=proc.pid, after_s=after_s, frame=native or frame, stack=stack, returned=returned)


def _innermost_native_frame(stack: str) -> str | None:
    """The innermost C++ frame of the first thread (py-spy lists the main thread first) that says
    more than a libc or standard-library wait: `c10d::ProcessGroupGloo::~ProcessGroupGloo`, not
    `std::thread::join`. None when the stack has no such frame above its Python ones."""
    lines = stack.splitlines()
    first = next((i for i, line in enumerate(lines) if line.startswith("Thread ")), len(lines))
    for line in lines[first + 1:]:
        if line.startswith("Thread "):
            return None
        text = line.strip()
        if ".py:" in text or text.startswith("<"):
            return None  # reached the Python frames
        name = text.split(" (", 1)[0]
        if "::" in name and not name.startswith("std::"):
            return name
    return None

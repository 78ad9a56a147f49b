"""Hang and straggler detection for one node's ranks.

A rank that stops making progress without dying (a deadlock, a collective waiting on a peer that
never comes, a process stopped by a signal, a disk that hangs) keeps its node's heartbeats going,
so liveness alone never notices. Every rank's last reported step and the time it advanced are
tracked here; a rank whose step has not advanced for the stall timeout is reported once (until it
advances again) with its Python stack, taken from outside the process by py-spy: no cooperation
from the script is needed, and a stopped process can be read too.

What the control plane needs to name the rank that holds the others (backend jobs/stalls.py) is
read here too: the process state (stopped, in uninterruptible sleep, gone) and where the main
thread's stack is: inside a collective (waiting on a peer) or outside any (the rank the others
wait for). Every stalled rank is looked at before anything is done about any (`examine`): under
`on_stall: recover` the first report ends the node's ranks, and the others' evidence with them,
unless every stalled rank here only waits on a peer: then the node that holds the job (its rank
stopped, gone, or outside any collective) is given a grace (SupervisorSettings.victim_grace_s) to end
the attempt itself, so that the control plane's verdict names it; a hang with no such node ends
after the grace.

Only ranks that report steps (`sdk.report(step=...)`) can be watched: without steps there is no
notion of progress to lose. A rank that reached the total it declared (`sdk.set_total_steps`) has
finished training: its last evaluation, checkpoint and teardown make no steps, and are not a stall.
"""

from __future__ import annotations

import os
import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

from torchyard.node.proctree import children, tree_usage
from torchyard.node.stacks import process_state, python_stack, stack_facts

# `stall_timeout: auto` (the default): a hang is declared after AUTO_FACTOR x the p95 of the job's
# own step times (the time between two steps it reports) without a step, never under AUTO_MIN_S;
# until AUTO_MIN_STEPS of them are timed (and for ranks that report no steps) the fixed
# DEFAULT_MIN_TIMEOUT_S holds. The p95 covers the slow
# steps that come round (a checkpoint every N steps, an evaluation pass) as long as they come round
# often enough to be in the tail; a rarer long pause should report no steps meanwhile, or the job
# sets a number.
AUTO_FACTOR = 2.0
AUTO_MIN_S = 15.0
AUTO_MIN_STEPS = 8
DEFAULT_MIN_TIMEOUT_S = 60.0


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
    silent: bool = False  # found by SilenceWatch: the rank reports no steps
    basis: str = ""  # how the timeout was set, in words: the verdict's evidence says which deadline applied


class StallWatch:
    """Per-rank progress; `stalled(now)` returns each rank once when it stops advancing."""

    def __init__(self, timeout: float | None = None) -> None:
        """`timeout` in seconds as the job set it; None for `auto` (see AUTO_FACTOR)."""
        self.explicit_timeout = timeout
        self._ranks: dict[int, _Rank] = {}

    def step(self, rank: int, step: int, now: float, total: int | None = None) -> None:
        """A rank reported `step` at `now` (monotonic seconds), of `total` when it declared one."""
        known = self._ranks.get(rank)
        if known is None:
            known = self._ranks[rank] = _Rank(step=step, advanced_at=now)
        elif step != known.step:
            if step > known.step:
                # The time between two reports, not per step: a script that reports every 10th step
                # goes that long without a word, and only a longer silence is a hang.
                known.intervals.append(now - known.advanced_at)
            # A step going back is a resume from a checkpoint: progress all the same.
            known.step, known.advanced_at, known.reported = step, now, False
        known.finished = total is not None and step >= total

    def timeout(self) -> float:
        return self.deadline()[0]

    def deadline(self) -> tuple[float, str]:
        """(seconds without a step that make a hang, how they were set, in words)."""
        if self.explicit_timeout is not None:
            return self.explicit_timeout, f"stall_timeout {self.explicit_timeout:g} s, set by the job"
        intervals = [i for r in self._ranks.values() for i in r.intervals]
        if len(intervals) < AUTO_MIN_STEPS:
            return DEFAULT_MIN_TIMEOUT_S, (f"auto: the fixed {DEFAULT_MIN_TIMEOUT_S:g} s until {AUTO_MIN_STEPS} step "
                                           f"times are known ({len(intervals)} so far)")
        p95 = statistics.quantiles(intervals, n=20, method="inclusive")[18]
        limit = max(AUTO_MIN_S, AUTO_FACTOR * p95)
        return limit, (f"auto: {AUTO_FACTOR:g} x the p95 step time ({p95:.3g} s between the last {len(intervals)} "
                       f"steps reported), at least {AUTO_MIN_S:g} s")

    def stalled(self, now: float) -> list[Stall]:
        """Ranks whose step has not advanced for the timeout and were not reported yet; with them,
        the node's other ranks that have not advanced for half of it. Those most likely wait on the
        same thing, a few milliseconds' metrics apart, and under `on_stall: recover` this check is
        the last look at them before the node's ranks are ended."""
        limit, basis = self.deadline()
        waiting = [(rank, known) for rank, known in sorted(self._ranks.items())
                   if not known.reported and not known.finished and now - known.advanced_at >= limit / 2]
        if not any(now - known.advanced_at >= limit for _, known in waiting):
            return []
        for _, known in waiting:
            known.reported = True
        return [Stall(rank=rank, step=known.step, stalled_for=round(now - known.advanced_at, 1), timeout=round(limit, 1),
                      basis=basis) for rank, known in waiting]

    def reports(self, rank: int) -> bool:
        """Whether the rank has reported a step (its progress is watched here)."""
        return rank in self._ranks

    def still_stalled(self, ranks: list[int]) -> bool:
        """Whether any of `ranks` has not advanced since it was reported."""
        return any(self._ranks[rank].reported for rank in ranks if rank in self._ranks)

    def snapshot(self, now: float) -> dict[str, list[float]]:
        """{rank: [last step, seconds since it advanced]} for heartbeats."""
        return {str(r): [k.step, round(now - k.advanced_at, 1)] for r, k in sorted(self._ranks.items())}


# A rank that reports no steps is watched by what it does instead (SilenceWatch): what it prints
# and reports, the CPU it uses, and where its threads wait. A thread in a timed sleep (`time.sleep`,
# whose kernel wait is a nanosleep) is quiet on purpose.
IDLE_CPU_SHARE = 0.02
TIMED_SLEEP = "nanosleep"


def blocked_in_kernel(proc: psutil.Process) -> bool:
    """Every thread of the process and of everything under it waits in the kernel (sleeping, in
    uninterruptible sleep, or stopped), none in a timed sleep; False when any runs, sleeps on a
    timer, or cannot be read."""
    try:
        pids = [proc.pid, *(child.pid for child in children(proc, recursive=True))]
    except psutil.Error:
        return False
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{pid}/task/{tid}/wchan") as wchan:
                    waits_in = wchan.read()
            except (OSError, IndexError):
                continue
            # S: waits; D: waits uninterruptibly; T and t: stopped by a signal or a debugger.
            if state not in ("S", "D", "T", "t") or TIMED_SLEEP in waits_in:
                return False
    return True


@dataclass
class _Quiet:
    since: float
    cpu: float
    io: int
    heard_at: float


class SilenceWatch:
    """Ranks that report no steps, hung without a word: for the stall timeout (the job's, else
    DEFAULT_MIN_TIMEOUT_S) each printed and reported nothing, used no CPU, read and wrote nothing
    (a slow download is not a hang), and had every thread waiting in the kernel, none on a timer. A rank that computes, prints, or sleeps in Python on
    purpose is only quiet. `look` returns a Stall once, until the rank does something again. The
    supervisor names a hang from silence only where a silent rank is outside any collective (or
    stopped): one waiting in a collective may wait on a busy peer (`not_yet`)."""

    def __init__(self, timeout: float | None = None) -> None:
        self.timeout = timeout if timeout is not None else DEFAULT_MIN_TIMEOUT_S
        self._ranks: dict[int, _Quiet] = {}
        self._reported: set[int] = set()

    def look(self, rank: int, proc: psutil.Process, heard_at: float, now: float) -> Stall | None:
        usage = tree_usage(proc)
        if usage is None:
            self._ranks.pop(rank, None)
            return None
        cpu, io = usage
        known = self._ranks.get(rank)
        busy = known is None or heard_at > known.heard_at or io != known.io or \
            cpu - known.cpu > IDLE_CPU_SHARE * max(now - known.since, 1.0) or not blocked_in_kernel(proc)
        if busy:
            self._ranks[rank] = _Quiet(since=now, cpu=cpu, io=io, heard_at=heard_at)
            self._reported.discard(rank)
            return None
        assert known is not None
        if now - known.since < self.timeout or rank in self._reported:
            return None
        self._reported.add(rank)
        return Stall(rank=rank, step=0, stalled_for=round(now - known.since, 1), timeout=round(self.timeout, 1),
                     silent=True, basis=f"{self.timeout:g} s of silence (the rank reports no steps)")

    def still_silent(self, ranks: list[int]) -> bool:
        return any(rank in self._reported for rank in ranks)

    def not_yet(self, rank: int, now: float) -> None:
        """The rank's silence named no hang (it waits in a collective on a peer that may be busy):
        look again after another timeout."""
        self._reported.discard(rank)
        if rank in self._ranks:
            self._ranks[rank].since = now


# psutil states that say the process itself holds its peers, whatever its stack: a signal stopped it
# (or a debugger), it is dead, or it waits in the kernel (a disk, a driver) and cannot be woken.
SUSPICIOUS_STATES = ("stopped", "tracing-stop", "zombie", "dead", "gone", "disk-sleep")


@dataclass(frozen=True)
class Examined:
    """A stalled rank's process as read from outside."""

    stall: Stall
    pid: int
    process_state: str
    stack: str
    waits_in: str | None  # see stack_facts
    frame: str | None

    @property
    def suspicion(self) -> int:
        """0: its process state names it; 1: its stack is outside any collective; 2: neither."""
        if self.process_state in SUSPICIOUS_STATES:
            return 0
        return 1 if self.waits_in == "" else 2


def examine(stalls: list[Stall], pid_of: Callable[[int], int | None],
            mask: Callable[[str], str] = lambda text: text) -> list[Examined]:
    """Every stalled rank's process state and Python stack (passed through `mask`), all read before
    the caller acts on any; the most suspicious first, so a failure names the rank that holds the
    others. A rank whose process has ended is left out: its steps are over (the others may still be
    saving or tearing down) or it crashed, and either way torchrun reports how it ended; its silence
    since is no hang."""
    found = []
    for stall in stalls:
        pid = pid_of(stall.rank)
        if pid is None:
            continue
        state = process_state(pid)
        stack = mask(python_stack(pid))
        found.append(Examined(stall, pid, state, stack, *stack_facts(stack)))
    return sorted(found, key=lambda seen: (seen.suspicion, seen.stall.rank))

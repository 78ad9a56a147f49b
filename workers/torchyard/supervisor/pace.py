"""Each rank's own pace, for the control plane to find stragglers (backend jobs/control/stragglers.py).

In synchronous training every rank takes the same wall time per step: the fast ones wait in the
collective for the slow one. What tells them apart is how much of that time a rank spends waiting
on its peers. This module samples each rank's main thread from outside (/proc, no cooperation from
the script): asleep on a lock, a socket or a future is waiting on peers; running, waiting for a CPU
(runnable: contention, or a cgroup's CPU quota), stopped (SIGSTOP, a debugger), in uninterruptible
sleep (a disk) or in a timed sleep (`time.sleep`, on purpose) is the rank's own time. A rank's
`own_step_s` is its wall time per step times that share: about the whole step for the rank the
others wait for, its compute alone for the others. The control plane compares each rank's with the
job's median.

Every window a `pace` event says, per rank: the wall time per step, the share of its own time, and
what the machine shows that would explain a slow rank: the share of the window it waited for a CPU
(/proc's schedstat run delay), how often its cgroup's CPU quota throttled it, the share it was
stopped, the machine's CPU steal, and, when a rank waited for a CPU, the processes outside the job
that used the most CPU.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from torchyard.stream_contract import OtherProcess, PaceEvent, PaceHost, RankPace

from .stall import TIMED_SLEEP

# How often each rank's main thread is looked at, and how many processes outside the job are named.
SAMPLE_EVERY_S = 0.1
TOP_OTHERS = 3
# A rank that waited for a CPU this share of the window gets the busiest other processes named.
CPU_WAIT_WORTH_NAMING = 0.1


def _read(path: str) -> str | None:
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def thread_state(pid: int) -> str | None:
    """The main thread's state letter (R, S, D, T, t, Z...), with "N" for a timed sleep; None if gone."""
    stat = _read(f"/proc/{pid}/task/{pid}/stat")
    if stat is None:
        return None
    try:
        state = stat.rsplit(")", 1)[1].split()[0]
    except IndexError:
        return None
    if state == "S" and TIMED_SLEEP in (_read(f"/proc/{pid}/task/{pid}/wchan") or ""):
        return "N"
    return state


def run_delay_s(pid: int) -> float | None:
    """Seconds the process's threads spent runnable but not running, so far (schedstat's 2nd field)."""
    total, found = 0, False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return None
    for tid in tasks:
        fields = (_read(f"/proc/{pid}/task/{tid}/schedstat") or "").split()
        if len(fields) >= 2:
            total += int(fields[1])
            found = True
    return total / 1e9 if found else None


def cgroup_throttled(pid: int) -> int | None:
    """How many times the process's cgroup (v2) hit its CPU quota, so far; None without one."""
    lines = (_read(f"/proc/{pid}/cgroup") or "").splitlines()
    path = next((line.split(":", 2)[2] for line in lines if line.startswith("0::")), None)
    if path is None:
        return None
    stat = _read(str(Path("/sys/fs/cgroup") / path.lstrip("/") / "cpu.stat")) or ""
    for line in stat.splitlines():
        name, _, value = line.partition(" ")
        if name == "nr_throttled":
            return int(value)
    return None


def cpu_steal_s() -> float | None:
    """The machine's CPU steal so far, in seconds (a virtual machine's host ran something else)."""
    line = (_read("/proc/stat") or "").split("\n", 1)[0].split()
    if len(line) < 9 or line[0] != "cpu":
        return None
    return int(line[8]) / os.sysconf("SC_CLK_TCK")


def _counters(pid: int) -> tuple[float | None, int | None]:
    """(run_delay_s, cgroup_throttled) of the process now."""
    return run_delay_s(pid), cgroup_throttled(pid)


@dataclass
class _RankWindow:
    first: tuple[int, float] | None = None  # (step, when) of the first report in the window
    last: tuple[int, float] | None = None
    samples: dict[str, int] = field(default_factory=dict)  # state letter -> count
    run_delay: float | None = None  # at the window's start
    throttled: int | None = None
    counted: bool = False  # run_delay and throttled were read (None: the kernel does not say)


@dataclass
class PaceWatch:
    """Feed it `step` (each reported step) and `sample` (each monitor pass, it keeps its own rate);
    `report(now)` returns the window's figures once it has lasted `window_s`, else None."""

    window_s: float = 10.0
    _ranks: dict[int, _RankWindow] = field(default_factory=dict)
    _started: float | None = None
    _next_sample: float = 0.0
    _steal: float | None = None
    _others: dict[int, float] = field(default_factory=dict)  # pid -> CPU seconds at the window's start

    def step(self, rank: int, step: int, now: float) -> None:
        window = self._ranks.setdefault(rank, _RankWindow())
        if window.first is None or step < window.first[0]:
            window.first = (step, now)  # a step going back: a resume, the window starts again from it
        window.last = (step, now)

    def sample(self, pids: dict[int, int], now: float) -> None:
        """`pids`: {global rank: its process}."""
        if now < self._next_sample:
            return
        self._next_sample = now + SAMPLE_EVERY_S
        if self._started is None:
            self._begin(now, {pid: _counters(pid) for pid in pids.values()}, pids, cpu_steal_s())
        for rank, pid in pids.items():
            window = self._ranks.setdefault(rank, _RankWindow())
            if not window.counted:  # a rank first seen in this window
                window.run_delay, window.throttled = _counters(pid)
                window.counted = True
            state = thread_state(pid)
            if state is not None:
                window.samples[state] = window.samples.get(state, 0) + 1

    def due(self, now: float) -> bool:
        """The window has lasted window_s: `report` it."""
        return self._started is not None and now - self._started >= self.window_s

    def report(self, pids: dict[int, int], now: float, own_pids: set[int]) -> PaceEvent | None:
        """The window's `pace` event (a new window begins); None when no rank reported two steps.
        `own_pids`: the job's processes on this node, never named as another process."""
        if self._started is None:
            return None
        elapsed = now - self._started
        # Read once: the end of this window and the start of the next.
        counters = {pid: _counters(pid) for pid in pids.values()}
        ranks: dict[str, RankPace] = {}
        waited_for_cpu = False
        for rank, pid in sorted(pids.items()):
            figures = self._rank_figures(self._ranks.get(rank), counters[pid], elapsed)
            if figures is not None:
                ranks[str(rank)] = figures
                waited_for_cpu |= figures.get("cpu_wait", 0.0) >= CPU_WAIT_WORTH_NAMING
        steal_now = cpu_steal_s()
        host: PaceHost = {"cpus": os.cpu_count() or 1}
        if steal_now is not None and self._steal is not None:
            host["steal"] = round((steal_now - self._steal) / elapsed / (os.cpu_count() or 1), 3)
        others = self._other_processes(own_pids, elapsed)
        if waited_for_cpu and others:
            host["others"] = others
        self._begin(now, counters, pids, steal_now)
        return {"type": "pace", "window_s": round(elapsed, 1), "ranks": ranks, "host": host} if ranks else None

    def _rank_figures(self, window: _RankWindow | None, counters: tuple[float | None, int | None],
                      elapsed: float) -> RankPace | None:
        """None for a rank that reported fewer than two steps in the window (no step time)."""
        if window is None or window.first is None or window.last is None or window.last[0] <= window.first[0]:
            return None
        steps = window.last[0] - window.first[0]
        step_s = (window.last[1] - window.first[1]) / steps
        count = sum(window.samples.values())
        if not count:
            return None
        waiting = window.samples.get("S", 0)
        own_share = 1.0 - waiting / count
        figures: RankPace = {"step_s": round(step_s, 4), "own_share": round(own_share, 3),
                                   "own_step_s": round(step_s * own_share, 4), "steps": steps,
                                   "stopped": round((window.samples.get("T", 0) + window.samples.get("t", 0)) / count, 3)}
        delay, throttled = counters
        if delay is not None and window.run_delay is not None:
            figures["cpu_wait"] = round(max(delay - window.run_delay, 0.0) / elapsed, 3)
        if throttled is not None and window.throttled is not None:
            figures["throttled"] = throttled - window.throttled
        return figures

    def _begin(self, now: float, counters: dict[int, tuple[float | None, int | None]], pids: dict[int, int],
               steal: float | None) -> None:
        self._started, self._steal = now, steal
        # The last report carries over: a rank that reports every few seconds still spans the window.
        self._ranks = {rank: _RankWindow(first=old.last if (old := self._ranks.get(rank)) else None,
                                         last=old.last if old else None, run_delay=counters[pid][0],
                                         throttled=counters[pid][1], counted=True)
                       for rank, pid in pids.items()}

    def _other_processes(self, own_pids: set[int], elapsed: float) -> list[OtherProcess]:
        """The processes outside the job that used the most CPU since the last window (their share
        of one CPU), busiest first; the first window only takes the baseline."""
        seen: dict[int, float] = {}
        used: list[tuple[float, int, str]] = []
        for proc in psutil.process_iter(["pid", "name", "cpu_times"]):
            info = proc.info
            times = info.get("cpu_times")
            if times is None or info["pid"] in own_pids:
                continue
            cpu = times.user + times.system
            seen[info["pid"]] = cpu
            before = self._others.get(info["pid"])
            if before is not None and cpu > before:
                used.append((cpu - before, info["pid"], info.get("name") or "?"))
        self._others = seen
        used.sort(reverse=True)
        return [{"pid": pid, "name": name, "cpu": round(delta / elapsed, 2)}
                for delta, pid, name in used[:TOP_OTHERS] if delta / elapsed >= 0.05]

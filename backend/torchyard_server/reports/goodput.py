"""The goodput ledger of one job (DESIGN.md section 15): its wall time, from its submission to its
end (or now), split into what the time went to, from the events it already streamed. Pure: it takes
the job's facts (goodput_facts.py reads them) and knows no database, so a test writes a history by
hand.

Every second of the wall time goes to exactly one category, so the parts add up to the wall time by
construction. Each fact claims the stretch of time it explains, with a rank; where claims overlap,
the higher rank wins (from the top):

1. What the job's own status says while no attempt runs: `queued` (waiting to start), `preempted`
   (waiting in the queue again after yielding to another job) and `recovery` (a failed attempt's
   nodes stopped, the back-off, the re-plan; a relaunch that waits in the queue for machines). The
   status is the controller's word, so nothing below overrides it.
2. `hang`: from a rank's last progress to the detection of a stall (its `stalled` event) or of a
   lost node; after a stall that was only reported, until the steps move again.
3. `checkpoint`: the seconds each save held the training loop (the manifest's blocking_seconds).
4. `idle`: a pause between two steps far longer than the job's usual step (three times the median,
   and five seconds more than it), less one usual step.
5. `lost_work`: steps computed, then redone after the job resumed from an earlier checkpoint (from
   the moment the attempt passed the step the next attempt resumed from, to its last step), and what
   a crashed attempt did after its last step.
6. `training`: from the attempt's first step (less the steps its first report covers) to its last.
   A script that reports no steps at all trains, as far as anyone can tell, while its ranks run.
7. Before an attempt's first step: `code_fetch`, `environment_build` or `launch` (the nodes started,
   preflight, rendezvous and the script's own start), whichever the least advanced node is in.
8. The rest of a running attempt, by the job's status: `launch` while dispatching, `preempted` while
   yielding, and `idle` otherwise (running but not stepping: after the last step, while stopping).

Goodput is training over wall time. Per attempt, the same split: attempt N's part of the wall time
runs from its dispatch to the next attempt's (attempt 0's from the submission), so what an attempt's
failure cost (its lost work, the hang, the recovery) is in that attempt's split.
"""

from __future__ import annotations

import bisect
import heapq
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

QUEUED = "queued"
PREEMPTED = "preempted"
CODE_FETCH = "code_fetch"
ENVIRONMENT_BUILD = "environment_build"
LAUNCH = "launch"
TRAINING = "training"
CHECKPOINT = "checkpoint"
RECOVERY = "recovery"
LOST_WORK = "lost_work"
HANG = "hang"
IDLE = "idle"
# In the order of a job's life, as every answer lists them.
CATEGORIES = (QUEUED, PREEMPTED, CODE_FETCH, ENVIRONMENT_BUILD, LAUNCH, TRAINING, CHECKPOINT, RECOVERY, LOST_WORK,
              HANG, IDLE)
PRODUCTIVE = TRAINING
# The version of these rules: the goodput ledger (usage.models.JobGoodput) computes again what older
# rules split. One more whenever a change here would split a past job differently.
RULES = 1

# The ranks of the module docstring's precedence (higher wins).
_STATUS, _HANG, _CHECKPOINT, _IDLE, _LOST, _TRAINING, _STARTUP, _BASE = 80, 70, 60, 50, 40, 30, 20, 10

# A pause between two progress points is idle past IDLE_FACTOR times the median one, and past the
# median plus IDLE_MIN_SECONDS (a 3 s evaluation between 10 ms steps is not worth a name).
IDLE_FACTOR = 3.0
IDLE_MIN_SECONDS = 5.0

# Job statuses (jobs.models.Job.Status), by what they mean here.
_WAITING = frozenset({"queued", "planning", "preempted"})
_RUNNING = frozenset({"dispatching", "running", "preempting", "stopping"})
_STARTING = frozenset({"dispatching", "running"})
_BASE_CATEGORY = {"dispatching": LAUNCH, "running": IDLE, "preempting": PREEMPTED, "stopping": IDLE}
_FINAL = frozenset({"completed", "failed", "stopped"})
_NODE_ENDED = frozenset({"completed", "failed", "lost", "stopped"})

# The node's preparation (workers/torchyard/supervisor/preparation.py and the lines it streams).
_PHASE_ORDER = {CODE_FETCH: 0, ENVIRONMENT_BUILD: 1, LAUNCH: 2}
_ENV_BUILDING = re.compile(r"^creating environment \S+")
_ENV_READY = re.compile(r"^environment \S+ (ready in|is in this machine's cache)")
_WORKDIR_READY = re.compile(r"^working directory from code bundle")
_RESUMING = re.compile(r"resuming from (\S+)")


@dataclass(frozen=True)
class JobState:
    """A job transition (its `state` event of scope job): the attempt it names is the job's then."""

    ts: float
    status: str
    attempt: int
    reason: str = ""


@dataclass(frozen=True)
class NodeState:
    ts: float
    node: int
    attempt: int
    status: str
    reason: str = ""


@dataclass(frozen=True)
class PrepareLine:
    """A line of a node's preparation (a `log` event of source prepare or pip)."""

    ts: float
    node: int
    attempt: int
    line: str


@dataclass(frozen=True)
class Progress:
    """The first moment any rank of the attempt reported `step`."""

    ts: float
    attempt: int
    step: int


@dataclass(frozen=True)
class Checkpoint:
    attempt: int
    step: int
    uri: str
    committed: float
    blocking: float | None = None
    background: float | None = None
    saved_async: bool = False

    def blocked(self) -> tuple[float, float] | None:
        """When save() held the training loop: it returned `background` seconds before the commit
        (an async save), or at the commit."""
        if not self.blocking:
            return None
        returned = self.committed - ((self.background or 0.0) if self.saved_async else 0.0)
        return returned - self.blocking, returned


@dataclass(frozen=True)
class Stall:
    ts: float
    attempt: int
    stalled_for: float
    on_stall: str = "report"


@dataclass
class JobFacts:
    """What the split is computed from. Times are epoch seconds; `end` is when the job finished, or
    now; `status` is the job's now. Without any job transition (rows made by hand), the job's row
    says it all: queued from `created` to `started`, running from then on. `heartbeat_timeout`: how
    long a node was silent before it was called lost (the job's fault_tolerance)."""

    created: float
    end: float
    status: str = "queued"
    started: float | None = None
    heartbeat_timeout: float = 10.0
    states: list[JobState] = field(default_factory=list)
    node_states: list[NodeState] = field(default_factory=list)
    prepare: list[PrepareLine] = field(default_factory=list)
    progress: list[Progress] = field(default_factory=list)
    checkpoints: list[Checkpoint] = field(default_factory=list)
    stalls: list[Stall] = field(default_factory=list)


@dataclass(frozen=True)
class Segment:
    start: float
    end: float
    category: str
    attempt: int


@dataclass
class Split:
    """Seconds per category over [start, end]."""

    start: float
    end: float
    parts: dict[str, float]

    @property
    def wall(self) -> float:
        return max(self.end - self.start, 0.0)

    @property
    def goodput(self) -> float:
        return self.parts[PRODUCTIVE] / self.wall if self.wall > 0 else 0.0


@dataclass
class AttemptSplit(Split):
    attempt: int = 0


@dataclass
class JobSplit(Split):
    attempts: list[AttemptSplit] = field(default_factory=list)
    # The wall time in order, each stretch with its category and attempt.
    segments: list[Segment] = field(default_factory=list)


@dataclass(frozen=True)
class _Claim:
    start: float
    end: float
    rank: int
    category: str


@dataclass
class _Window:
    """One stretch of one job status."""

    start: float
    end: float
    status: str
    attempt: int
    reason: str
    cause: str = ""  # what a wait is for: queued, preempted or recovery


def empty_parts() -> dict[str, float]:
    return dict.fromkeys(CATEGORIES, 0.0)


def job_goodput(facts: JobFacts) -> JobSplit:
    """The job's wall time split, overall, per attempt and in order (the module's docstring)."""
    start, end = facts.created, max(facts.end, facts.created)
    windows = _status_windows(facts, start, end)
    claims: list[_Claim] = []
    for window in windows:
        if window.status in _WAITING:
            claims.append(_Claim(window.start, window.end, _STATUS, window.cause))
        elif window.status == "recovering":
            claims.append(_Claim(window.start, window.end, _STATUS, RECOVERY))
        else:
            claims.append(_Claim(window.start, window.end, _BASE, _BASE_CATEGORY.get(window.status, IDLE)))
    attempts = sorted({w.attempt for w in windows if w.status in _RUNNING})
    resumed = {a: _resumed_from(facts, windows, a) for a in attempts}
    live = facts.status not in _FINAL and windows[-1].status in _RUNNING
    for index, attempt in enumerate(attempts):
        later = attempts[index + 1] if index + 1 < len(attempts) else None
        claims += _attempt_claims(facts, windows, attempt, resumed[attempt][0],
                                  None if later is None else resumed[later],
                                  live=live and windows[-1].attempt == attempt)
    segments = _paint(claims, start, end, _attempt_starts(windows, start))
    total = JobSplit(start, end, empty_parts())
    by_attempt: dict[int, AttemptSplit] = {}
    for seg in segments:
        total.parts[seg.category] += seg.end - seg.start
        split = by_attempt.get(seg.attempt)
        if split is None:
            split = by_attempt[seg.attempt] = AttemptSplit(seg.start, seg.end, empty_parts(), attempt=seg.attempt)
        split.end = seg.end
        split.parts[seg.category] += seg.end - seg.start
    total.attempts = [by_attempt[a] for a in sorted(by_attempt)]
    total.segments = _merged(segments)
    return total


# --- the job's status, window by window ---------------------------------------------------------
def _status_windows(facts: JobFacts, start: float, end: float) -> list[_Window]:
    states = sorted(facts.states, key=lambda s: s.ts)
    if not states:
        states = [JobState(start, "queued", 0)]
        if facts.started is not None:
            states.append(JobState(facts.started, "running", 0))
    windows: list[_Window] = [_Window(start, start, "queued", 0, "", QUEUED)]
    for state in states:
        at = min(max(state.ts, start), end)
        last = windows[-1]
        if state.status == last.status and state.attempt == last.attempt:
            continue  # a priority change, or the submission's own `queued`
        last.end = at
        windows.append(_Window(at, at, state.status, state.attempt, state.reason))
    windows[-1].end = end
    for before, window in zip(windows, windows[1:], strict=False):
        if window.status in _WAITING:
            if before.status in _WAITING:
                window.cause = before.cause
            elif window.status == "preempted" or before.status == "preempting":
                window.cause = PREEMPTED
            elif before.status == "recovering":
                window.cause = RECOVERY
            else:
                window.cause = QUEUED
    return [w for w in windows if w.end > w.start or w is windows[-1]]


def _attempt_starts(windows: list[_Window], start: float) -> list[tuple[float, int]]:
    """(when, attempt): attempt 0 from the submission, each later one from its dispatch."""
    starts = [(start, 0)]
    for window in windows:
        if window.status in _RUNNING and window.attempt > starts[-1][1]:
            starts.append((window.start, window.attempt))
    return starts


def _resumed_from(facts: JobFacts, windows: list[_Window], attempt: int) -> tuple[int, Checkpoint | None]:
    """The step `attempt` started from and its checkpoint: none for a first launch, else the one
    its dispatch named (jobs/control/dispatch.py: "resuming from URI" or "from scratch"); without
    that, the newest committed before the dispatch."""
    dispatch = next((w for w in windows if w.attempt == attempt and w.status in _RUNNING), None)
    if attempt == 0 or dispatch is None or "from scratch" in dispatch.reason:
        return 0, None
    if found := _RESUMING.search(dispatch.reason):
        uri = found.group(1).rstrip(",;")
        named = next((c for c in facts.checkpoints if c.uri == uri), None)
        if named is not None:
            return named.step, named
    before = [c for c in facts.checkpoints if c.committed <= dispatch.start]
    newest = max(before, key=lambda c: c.committed, default=None)
    return (newest.step, newest) if newest else (0, None)


# --- one attempt --------------------------------------------------------------------------------
def _clip(claims: Iterable[_Claim], spans: list[tuple[float, float]]) -> list[_Claim]:
    clipped = []
    for claim in claims:
        for lo, hi in spans:
            a, b = max(claim.start, lo), min(claim.end, hi)
            if b > a:
                clipped.append(_Claim(a, b, claim.rank, claim.category))
    return clipped


def _monotone(points: list[Progress], lo: float, hi: float) -> list[Progress]:
    """The attempt's progress in time order, each point a new highest step; times pulled into the
    attempt's running time (a node's clock may be a little off the controller's)."""
    kept: list[Progress] = []
    for p in sorted(points, key=lambda p: (p.ts, p.step)):
        if not kept or p.step > kept[-1].step:
            kept.append(Progress(min(max(p.ts, lo), hi), p.attempt, p.step))
    return kept


def _typical(points: list[Progress]) -> tuple[float | None, float | None]:
    """The median seconds between two progress points, and per step."""
    gaps = [(b.ts - a.ts, b.step - a.step) for a, b in zip(points, points[1:], strict=False)]
    if not gaps:
        return None, None
    return statistics.median(g for g, _ in gaps), statistics.median(g / s for g, s in gaps)


def _idle_after(gap: float, usual: float | None) -> float:
    """How much of a pause between steps is idle: none while it is like the usual one."""
    if usual is None:
        return gap if gap > IDLE_MIN_SECONDS else 0.0
    if gap > max(IDLE_FACTOR * usual, usual + IDLE_MIN_SECONDS):
        return gap - usual
    return 0.0


def _attempt_claims(facts: JobFacts, windows: list[_Window], attempt: int, resumed: int,
                    redone: tuple[int, Checkpoint | None] | None, *, live: bool) -> list[_Claim]:
    """What the attempt's own facts claim, within its running windows. `resumed`: the step it
    started from; `redone`: the step (and checkpoint) the next attempt resumed from, None when no
    attempt came after it."""
    running = [w for w in windows if w.attempt == attempt and w.status in _RUNNING]
    spans = [(w.start, w.end) for w in running]
    lo, hi = running[0].start, running[-1].end
    ranks_up = next((w.start for w in running if w.status == "running"), hi)
    points = _monotone([p for p in facts.progress if p.attempt == attempt], lo, hi)
    claims: list[_Claim] = []
    if points:
        started = _steps_claims(facts, attempt, points, running, windows, resumed, redone, ranks_up, live, claims)
    elif not facts.progress:
        # A script that reports no steps: its ranks' running time is training, as far as anyone
        # outside can tell, less what the facts below claim.
        started = ranks_up
        claims += [_Claim(w.start, w.end, _TRAINING, TRAINING) for w in running if w.status == "running"]
        if redone is not None:
            checkpoint = redone[1]
            since = checkpoint.committed if checkpoint is not None and checkpoint.attempt == attempt else ranks_up
            claims.append(_Claim(max(since, ranks_up), hi, _LOST, LOST_WORK))
    else:
        started = hi  # it never reached a step
    startup = [(w.start, min(w.end, started)) for w in running if w.status in _STARTING and min(w.end, started) > w.start]
    claims += _clip(_startup_claims(facts, attempt, lo, hi), startup)
    claims += _hang_claims(facts, attempt, points, lo, hi)
    for checkpoint in facts.checkpoints:
        if checkpoint.attempt == attempt and (blocked := checkpoint.blocked()):
            claims.append(_Claim(blocked[0], blocked[1], _CHECKPOINT, CHECKPOINT))
    return _clip(claims, spans)


def _steps_claims(facts: JobFacts, attempt: int, points: list[Progress], running: list[_Window],
                  windows: list[_Window], resumed: int, redone: tuple[int, Checkpoint | None] | None,
                  ranks_up: float, live: bool, claims: list[_Claim]) -> float:
    """Training from the first step to the last, the idle pauses between, and the lost work; returns
    when training began: the first report less the steps it covers, not before the ranks ran."""
    lo, hi = running[0].start, running[-1].end
    usual, per_step = _typical(points)
    first, last = points[0], points[-1]
    covered = max(first.step - resumed, 0) * per_step if per_step is not None else 0.0
    started = min(max(first.ts - covered, min(ranks_up, first.ts), lo), first.ts)
    claims.append(_Claim(started, last.ts, _TRAINING, TRAINING))
    for a, b in zip(points, points[1:], strict=False):
        idle = _idle_after(b.ts - a.ts - _blocked_within(facts, attempt, a.ts, b.ts), usual)
        if idle > 0:
            claims.append(_Claim(a.ts, a.ts + idle, _IDLE, IDLE))
    if live:
        # Still running: the time since the last step is training until it is an idle pause.
        claims.append(_Claim(last.ts, hi - _idle_after(hi - last.ts, usual), _TRAINING, TRAINING))
    if redone is not None:
        step = redone[0]
        if step < last.step:
            if step < first.step:
                since = started
            else:
                i = bisect.bisect_right([p.step for p in points], step) - 1
                a, b = points[i], points[i + 1]
                since = a.ts + (b.ts - a.ts) * (step - a.step) / (b.step - a.step)
            claims.append(_Claim(since, last.ts, _LOST, LOST_WORK))
        after = next((w for w in windows if w.start >= running[-1].end and w is not running[-1]), None)
        if after is not None and after.status == "recovering":
            # It crashed: what it did after its last step is redone too.
            claims.append(_Claim(last.ts, hi, _LOST, LOST_WORK))
    return started


def _blocked_within(facts: JobFacts, attempt: int, a: float, b: float) -> float:
    total = 0.0
    for checkpoint in facts.checkpoints:
        if checkpoint.attempt == attempt and (blocked := checkpoint.blocked()):
            total += max(0.0, min(blocked[1], b) - max(blocked[0], a))
    return total


def _startup_claims(facts: JobFacts, attempt: int, lo: float, hi: float) -> list[_Claim]:
    """Before the first step, the attempt waits for its least advanced node: fetching the code,
    building the environment, or launching (preflight, rendezvous, the script's start)."""
    changes: list[tuple[float, int, str | None]] = []
    for state in facts.node_states:
        if state.attempt != attempt:
            continue
        if state.status in _NODE_ENDED:
            phase = None
        elif state.status == "preparing" and not state.reason.startswith("preflight"):
            phase = CODE_FETCH
        else:
            phase = LAUNCH
        changes.append((state.ts, state.node, phase))
    for line in facts.prepare:
        if line.attempt != attempt:
            continue
        if _ENV_BUILDING.match(line.line):
            changes.append((line.ts, line.node, ENVIRONMENT_BUILD))
        elif _ENV_READY.match(line.line) or _WORKDIR_READY.match(line.line):
            changes.append((line.ts, line.node, LAUNCH))
    changes.sort(key=lambda c: c[0])
    phases: dict[int, str | None] = {}
    claims: list[_Claim] = []
    at, current = lo, LAUNCH
    for ts, node, phase in changes:
        ts = min(max(ts, lo), hi)
        if ts > at:
            claims.append(_Claim(at, ts, _STARTUP, current))
            at = ts
        phases[node] = phase
        known = [p for p in phases.values() if p is not None]
        current = min(known, key=_PHASE_ORDER.__getitem__) if known else LAUNCH
    if hi > at:
        claims.append(_Claim(at, hi, _STARTUP, current))
    return claims


def _hang_claims(facts: JobFacts, attempt: int, points: list[Progress], lo: float, hi: float) -> list[_Claim]:
    """A stall: from the stalled rank's last progress to its detection, and on until the steps move
    again (a stall only reported goes on hanging). A lost node: from the last progress to its
    detection."""
    times = [p.ts for p in points]
    claims = []
    for stall in facts.stalls:
        if stall.attempt != attempt:
            continue
        at = min(max(stall.ts, lo), hi)
        i = bisect.bisect_right(times, at)
        since = max(at - max(stall.stalled_for, 0.0), times[i - 1] if i else lo)
        until = times[i] if i < len(times) else hi
        claims.append(_Claim(since, until, _HANG, HANG))
    heard: dict[int, float] = {}
    for state in sorted(facts.node_states, key=lambda s: s.ts):
        if state.attempt != attempt:
            continue
        if state.status == "lost" and lo <= state.ts <= hi:
            i = bisect.bisect_right(times, state.ts)
            # Before any step: silent for the heartbeat timeout, at most since its last word.
            since = times[i - 1] if i else max(state.ts - facts.heartbeat_timeout, heard.get(state.node, lo))
            claims.append(_Claim(since, state.ts, _HANG, HANG))
        heard[state.node] = state.ts
    return claims


# --- every claim onto the wall time -------------------------------------------------------------
def _paint(claims: list[_Claim], start: float, end: float, attempt_starts: list[tuple[float, int]]) -> list[Segment]:
    """Each moment of [start, end] to the highest-ranked claim on it (ties: the earlier claim),
    cut where an attempt begins."""
    claims = [c for c in claims if c.end > c.start]
    edges = sorted({start, end, *(t for t, _ in attempt_starts),
                    *(t for c in claims for t in (c.start, c.end) if start < t < end)})
    edges = [t for t in edges if start <= t <= end]
    by_start = sorted(range(len(claims)), key=lambda i: claims[i].start)
    active: list[tuple[int, int, float]] = []  # (-rank, order, end)
    starts = [t for t, _ in attempt_starts]
    segments: list[Segment] = []
    k = 0
    for a, b in zip(edges, edges[1:], strict=False):
        while k < len(by_start) and claims[by_start[k]].start <= a:
            claim = claims[by_start[k]]
            heapq.heappush(active, (-claim.rank, by_start[k], claim.end))
            k += 1
        while active and active[0][2] <= a:
            heapq.heappop(active)
        # Expired claims below the top are dropped when they surface.
        category = claims[active[0][1]].category if active else IDLE
        attempt = attempt_starts[max(bisect.bisect_right(starts, a) - 1, 0)][1]
        segments.append(Segment(a, b, category, attempt))
    return segments


def _merged(segments: list[Segment]) -> list[Segment]:
    merged: list[Segment] = []
    for seg in segments:
        if merged and merged[-1].category == seg.category and merged[-1].attempt == seg.attempt \
                and merged[-1].end == seg.start:
            merged[-1] = Segment(merged[-1].start, seg.end, seg.category, seg.attempt)
        else:
            merged.append(seg)
    return merged

"""The one queue of a shared cluster (DESIGN.md section 14): order, backfill, quotas.

Queued jobs wait in one order: priority (higher first), then submission (strict FIFO within a
priority). A pass walks them in that order against snapshots of the machines (the planner's
`Candidate`s) and of what live jobs hold:

- The first job that cannot start is the queue's **head**. Its *shadow time* is when it is expected
  to fit: the running jobs are released in the order they are expected to end (their time limit
  from their start, their progress's ETA, a stopping job's stop timeout) until the planner places
  it. Jobs with neither an ETA nor a time limit never end in that reckoning; when the head fits
  only once they do too, its start is unknown.
- A later job that fits now starts only when it cannot delay the head (EASY backfilling): it ends
  before the shadow time (its own time limit), or the head still fits on the machines reserved for
  it at the shadow time with this job's nodes taken. With an unknown shadow time only the second
  holds: nothing goes onto the head's machines that would leave it less room there.
- A project's quota (`max_gpus`, `max_processes`: what its running jobs hold at once) is checked
  before anything: a job past it waits, saying so, unless the project may `borrow`. Then, after
  every job within its quota has had its turn, it may start on capacity left over (idle, and not
  needed by the head) and is marked `borrowing`: what preemption takes back first. Within a
  project, a job that would use the part of the quota the head needs counts as delaying it.

Every pass runs under the placement lock (control/lock.py placement_lock), so two controller processes
never both place a job and racing submissions can never take a project past its quota. Waiting
jobs are not transitioned: their reason (in words: the planner's, then the queue's) is written to
`status_reason` when it changed, and the queue as it now stands goes to the dashboards
(registries.queue_changed). `evaluate` is a pure function: `GET /api/queue` shows what a pass would
decide now, with the same code.

Lossless preemption: when the head cannot start, the pass may choose running jobs to preempt for it
(`choose_victims`): borrowing jobs of other projects first (a project reclaiming its quota), then
lowest priority first, then least work lost (time since the last committed checkpoint); never a job
of higher priority, nor one of equal priority unless it borrows beyond its quota while the head's
project has a quota to reclaim; never `preemptible: false`; only as many as the head needs (the
planner places it with their nodes freed); never a job resumed after a preemption that has not yet
run PREEMPTION_MIN_RUN seconds (the head waits for that instead, saying so). Victims go `preempting`
(their ranks checkpoint and yield, stop.job_preempt), then `preempted`: waiting again, in this
same order. While jobs already preempting will make room for the head, no other is chosen; as
everything here runs under the placement lock and each victim's transition is conditional, two
passes never both preempt for one job.

Hot spares used (a spare took a lost node's place) are held again by a pass, on a free machine,
only when no queued job waits for room. A recovery that needs machines other than its own waits
here too when a job comes before it (dispatch.recovery_plan)."""

from __future__ import annotations

import bisect
import datetime as dt
import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

from django.conf import settings

from ...projects.priorities import priority_label
from ..models import Job, JobNode
from ..registries import QueuedJob, last_checkpoint_times
from ..spec.jobspec import JobSpec, grace_of
from ..spec.plan import Plan
from ..states import JOB_WAITING, NODE_LIVE
from .candidates import machine_candidates
from .planner import Candidate, PlanError, plan_job, plural
from .quotas import Quota, least_need, over_quota, plan_need, project_quotas

J = Job.Status


# What a queued job waits for (QueueEntryOut.blocked_by); None: it starts now.
RESOURCES, CAPACITY, QUOTA, HEAD, INVALID = "resources", "capacity", "quota", "head", "invalid"


Nodes = list[tuple[int, tuple[int, ...], int]]  # (machine id, GPU indexes, processes) per node


# --- what the queue sees ----------------------------------------------------------------------------
@dataclass
class Waiting:
    """A queued job."""

    id: int
    name: str
    spec: JobSpec
    priority: int
    project_id: int
    project: str
    owner: str
    created_at: dt.datetime
    queued_at: dt.datetime | None = None
    status_reason: str = ""
    status: str = J.QUEUED  # or preempted: it waits alike


@dataclass
class Holding:
    """What a live job holds, and when it is expected to let go (epoch seconds; None: unknown)."""

    job_id: int
    project_id: int
    ends_at: float | None
    nodes: Nodes
    priority: int = 0
    order: int = 0  # placement order: the first of its live nodes' ids
    borrowing: bool = False
    status: str = J.RUNNING
    preemptible: bool = True
    lost_work: float = 0.0  # seconds of work a preemption would lose: since its last committed checkpoint
    grace: float = 120.0  # preemption.grace
    # Seconds before it may be preempted: a job resumed after a preemption runs PREEMPTION_MIN_RUN first.
    protected_for: float = 0.0

    @property
    def need(self) -> tuple[int, int]:
        return sum(len(gpus) for _, gpus, _ in self.nodes), sum(procs for _, _, procs in self.nodes)


@dataclass
class Decision:
    """What the queue makes of one queued job in a pass."""

    job: Waiting
    position: int
    start: bool = False
    plan: Plan | None = None
    need: tuple[int, int] = (0, 0)  # GPUs, processes: the plan's, or the least the spec could run on
    borrowing: bool = False  # starts (or would) beyond its project's quota
    backfill: bool = False  # starts ahead of the head, which it cannot delay
    head: bool = False
    blocked_by: str | None = None
    reason: str = ""
    expected_start: float | None = None  # the head's shadow time, when known
    victims: list[Holding] = field(default_factory=list)  # running jobs to preempt for it (the head)


# --- snapshots ------------------------------------------------------------------------------------
def _copy(machines: Iterable[Candidate]) -> dict[int, Candidate]:
    return {m.id: replace(m, busy_gpus=set(m.busy_gpus)) for m in machines}


def _take(state: dict[int, Candidate], nodes: Nodes) -> None:
    for machine_id, gpus, procs in nodes:
        machine = state.get(machine_id)
        if machine is not None:
            machine.busy_gpus |= set(gpus)
            machine.busy_procs += procs
            machine.live_nodes += 1


def _free(state: dict[int, Candidate], nodes: Nodes) -> None:
    for machine_id, gpus, procs in nodes:
        machine = state.get(machine_id)
        if machine is not None:
            machine.busy_gpus -= set(gpus)
            machine.busy_procs = max(machine.busy_procs - procs, 0)
            machine.live_nodes = max(machine.live_nodes - 1, 0)


def plan_nodes(plan: Plan) -> Nodes:
    return [(n.machine_id, tuple(n.gpus), int(n.nproc)) for n in plan.nodes]


def _no_port(machine: Candidate) -> int:
    return 0


def _shape(spec: JobSpec) -> str:
    """What the planner reads of a spec: two queued jobs of one shape fit or not alike."""
    stored = spec.to_json()
    return json.dumps({key: stored.get(key) for key in (
        "resources", "placement", "volumes", "distributed", "function", "framework")}, sort_keys=True, default=str)


def _join(*parts: str) -> str:
    return "; ".join(part for part in parts if part)


def _in(seconds: float) -> str:
    """When, in words a person reads at a glance; rounded so the text does not change every pass."""
    if seconds <= 60:
        return "within a minute"
    minutes = -(-int(seconds) // 60)
    if minutes <= 90:
        return f"in about {minutes} min"
    return f"in about {round(minutes / 60)} h"


def _names(job_ids: list[int]) -> str:
    shown = ", ".join(f"#{j}" for j in job_ids[:3])
    return shown + (f" and {len(job_ids) - 3} more" if len(job_ids) > 3 else "")


def expected_end(limit: Any, now: float, started: float | None = None, eta: Any = None) -> float | None:
    """When a job is expected to end: its time limit (spec.time_limit, as stored) from its start (from
    now, not started yet), or its ETA, whichever comes first; None when neither is known."""
    ends = []
    if isinstance(limit, (int, float)) and not isinstance(limit, bool) and limit > 0:
        ends.append((started if started is not None else now) + float(limit))
    if isinstance(eta, (int, float)) and not isinstance(eta, bool) and eta >= 0:
        ends.append(now + float(eta))
    return min(ends) if ends else None


# --- the head's reservation -----------------------------------------------------------------------
@dataclass
class Reservation:
    """Where and when the head is expected to start: the machines as they will be at its shadow time
    (what still runs then, and what was backfilled past it), and the machines its plan takes then."""

    job: Waiting
    shadow: float | None
    state: dict[int, Candidate]
    machines: list[int]
    need: tuple[int, int]
    now: float
    waits_for: list[int] = field(default_factory=list)  # the jobs whose end lets it start

    def describe(self) -> str:
        if self.shadow is None:
            return "first in line; the jobs it waits for have no ETA or time limit, so its start is unknown"
        when = _in(self.shadow - self.now)
        return f"first in line, expected to start {when}" + (
            f" (when {_names(self.waits_for)} {'ends' if len(self.waits_for) == 1 else 'end'})" if self.waits_for else "")

    def admits(self, plan: Plan, ends_at: float | None, *, same_project_quota: Quota | None = None,
               held: tuple[int, int] = (0, 0), need: tuple[int, int] = (0, 0)) -> str | None:
        """None when a job with this plan cannot delay the head (and from now on counts as holding
        its nodes at the shadow time, unless it ends before); else why it would."""
        if self.shadow is not None and ends_at is not None and ends_at <= self.shadow:
            return None
        if same_project_quota is not None:
            total = (held[0] + need[0], held[1] + need[1])
            if over_quota(same_project_quota, total, self.need):
                return (f"it would use the part of project {same_project_quota.name}'s quota that #{self.job.id} "
                        "needs")
        nodes = plan_nodes(plan)
        if any(machine_id in self.machines for machine_id, _, _ in nodes):
            trial = _copy(self.state[m] for m in self.machines if m in self.state)
            _take(trial, nodes)
            try:
                plan_job(self.job.spec, list(trial.values()), pick_port=_no_port)
            except PlanError:
                if self.shadow is None:
                    return f"it would take room #{self.job.id} needs, and when that frees up is unknown"
                limit = "it has no time limit" if ends_at is None else \
                    f"its time limit ends {_in(ends_at - self.now)}, after that"
                return f"it would take room #{self.job.id} needs {_in(self.shadow - self.now)}, and {limit}"
        _take(self.state, nodes)
        return None


def reserve(job: Waiting, state: dict[int, Candidate], holdings: list[Holding], now: float) -> Reservation | None:
    """The head's reservation: the earliest of the live jobs' expected ends at which the planner
    places it (releases only add room, so a binary search over the ends finds it). None when it
    would not fit even with everything released: the machines online cannot hold it."""
    known = [h for h in holdings if h.ends_at is not None]
    ends = sorted({h.ends_at for h in known if h.ends_at is not None})

    def at(moment: float) -> tuple[dict[int, Candidate], Plan | None]:
        trial = _copy(state.values())
        for holding in known:
            if holding.ends_at is not None and holding.ends_at <= moment:
                _free(trial, holding.nodes)
        try:
            return trial, plan_job(job.spec, list(trial.values()), pick_port=_no_port)
        except PlanError:
            return trial, None

    first = bisect.bisect_left(ends, True, key=lambda moment: at(moment)[1] is not None)
    if first < len(ends):
        trial, plan = at(ends[first])
        if plan is not None:
            waits_for = sorted(h.job_id for h in known if h.ends_at == ends[first])
            return Reservation(job, ends[first], trial, [n.machine_id for n in plan.nodes], plan_need(plan),
                               now, waits_for)
    trial = _copy(state.values())
    for holding in holdings:
        _free(trial, holding.nodes)
    try:
        plan = plan_job(job.spec, list(trial.values()), pick_port=_no_port)
    except PlanError:
        return None
    return Reservation(job, None, trial, [n.machine_id for n in plan.nodes], plan_need(plan), now)


# --- preemption -----------------------------------------------------------------------------------
def reclaims(job: Waiting, holding: Holding, quotas: dict[int, Quota]) -> bool:
    """`holding` borrows beyond its project's quota and `job`'s project has a quota to take back."""
    return holding.borrowing and holding.project_id != job.project_id and job.project_id in quotas


def may_preempt(job: Waiting, holding: Holding, quotas: dict[int, Quota]) -> bool:
    """Whether `job` may preempt `holding`: a running, preemptible job of lower priority, or of the
    same priority when it borrows capacity `job`'s project reclaims; never one of higher priority."""
    if holding.status != J.RUNNING or not holding.preemptible or holding.job_id == job.id or holding.protected_for > 0:
        return False
    return holding.priority < job.priority or (holding.priority == job.priority and reclaims(job, holding, quotas))


def _fits(spec: JobSpec, state: dict[int, Candidate]) -> bool:
    try:
        plan_job(spec, list(state.values()), pick_port=_no_port)
    except PlanError:
        return False
    return True


def choose_victims(job: Waiting, machines: dict[int, Candidate], holdings: list[Holding],
                   quotas: dict[int, Quota]) -> list[Holding] | None:
    """The running jobs to preempt so that `job` (the head, which does not fit now) starts: [] when
    the jobs already preempting make room for it (wait for them), None when no allowed choice does.
    In order: borrowing jobs its project reclaims, lowest priority, least work lost; then every
    chosen job whose room the head does not need after all is dropped (the most valuable first)."""
    yielding = [h for h in holdings if h.status == J.PREEMPTING]

    def room(freed: list[Holding]) -> dict[int, Candidate]:
        trial = _copy(machines.values())
        for holding in [*yielding, *freed]:
            _free(trial, holding.nodes)
        return trial

    if yielding and _fits(job.spec, room([])):
        return []
    candidates = sorted((h for h in holdings if may_preempt(job, h, quotas)),
                        key=lambda h: (not reclaims(job, h, quotas), h.priority, h.lost_work, -h.order))
    chosen: list[Holding] = []
    trial = room([])
    for holding in candidates:
        _free(trial, holding.nodes)
        chosen.append(holding)
        if _fits(job.spec, trial):
            break
    else:
        return None
    for holding in reversed(list(chosen)):
        rest = [h for h in chosen if h is not holding]
        if _fits(job.spec, room(rest)):
            chosen = rest
    return chosen


def preemption_reason(head: Waiting, victim: Holding, machines: dict[int, Candidate], need: tuple[int, int],
                      quotas: dict[int, Quota]) -> str:
    """Who preempts whom and why, as the victim's state event says it."""
    names = sorted({machines[m].name for m, _, _ in victim.nodes if m in machines})
    wants = plural(need[0], "GPU") if need[0] else plural(need[1], "process")
    why = f"preempted by #{head.id} (priority {priority_label(head.priority)}) of project {head.project}: " \
          f"needs {wants}" + (f" on {', '.join(names)}" if names else "")
    if reclaims(head, victim, quotas):
        why += f"; this job borrows beyond its project's quota, which project {head.project} reclaims"
    return why


# --- one pass, as a pure function -----------------------------------------------------------------
def evaluate(waiting: list[Waiting], machines: list[Candidate], holdings: list[Holding], quotas: dict[int, Quota],
             *, now: float, pick_port: Callable[[Candidate], int] | None = None) -> list[Decision]:
    """Decide, for every queued job in queue order, whether it starts now and why not. Nothing is
    written; `machines` and `holdings` are not changed. With `pick_port` (a real pass) the plans
    of the jobs that start get their master port."""
    state = _copy(machines)
    holdings = list(holdings)
    held: dict[int, tuple[int, int]] = {}
    for holding in holdings:
        g, p = held.get(holding.project_id, (0, 0))
        held[holding.project_id] = (g + holding.need[0], p + holding.need[1])
    failed: dict[str, PlanError] = {}  # by shape: room only shrinks during a pass
    # By shape, while nothing started since: 200 jobs held back by a quota cost one plan.
    placed: dict[str, Plan] = {}
    unplaceable: set[str] = set()  # shapes no release would let in: never the head
    head: Reservation | None = None
    decisions: list[Decision] = []
    borrowers: list[tuple[Decision, str]] = []

    def attempt(spec: JobSpec) -> tuple[Plan | None, PlanError | None]:
        shape = _shape(spec)
        if shape in failed:
            return None, failed[shape]
        if shape in placed:
            return placed[shape], None
        try:
            placed[shape] = plan_job(spec, list(state.values()), pick_port=_no_port)
            return placed[shape], None
        except PlanError as exc:
            failed[shape] = exc
            return None, exc

    def start(decision: Decision, plan: Plan, *, reason: str = "starting") -> None:
        job = decision.job
        if pick_port is not None:
            try:  # the same placement (the same snapshot), now with its master port
                plan = plan_job(job.spec, list(state.values()), pick_port=pick_port)
            except PlanError as exc:
                decision.blocked_by, decision.reason = RESOURCES, exc.reason
                return
        nodes = plan_nodes(plan)
        _take(state, nodes)
        placed.clear()  # the room they were planned in is gone
        need = plan_need(plan)
        g, p = held.get(job.project_id, (0, 0))
        held[job.project_id] = (g + need[0], p + need[1])
        holdings.append(Holding(job.id, job.project_id, expected_end(job.spec.time_limit, now), nodes, job.priority,
                                order=1 << 62, borrowing=decision.borrowing))
        decision.start, decision.plan, decision.need, decision.reason = True, plan, need, reason

    for position, job in enumerate(waiting, 1):
        decision = Decision(job, position)
        decisions.append(decision)
        plan, error = attempt(job.spec)
        if error is not None and error.kind == "invalid":
            decision.blocked_by, decision.reason = INVALID, error.reason
            continue
        decision.need = plan_need(plan) if plan is not None else least_need(job.spec)
        quota = quotas.get(job.project_id)
        over = over_quota(quota, held.get(job.project_id, (0, 0)), decision.need)
        if over and quota is not None and quota.borrow and job.spec.may_be_preempted:
            # Borrowed capacity is what preemption takes back: a job that may not be preempted never borrows.
            borrowers.append((decision, over))  # after every job within its quota
            continue
        if over:
            decision.blocked_by, decision.reason = QUOTA, _join(error.reason if error else "", over)
            continue
        if error is not None:
            decision.blocked_by = RESOURCES if error.kind == "busy" else CAPACITY
            if head is None and _shape(job.spec) not in unplaceable:
                head = reserve(job, state, holdings, now)
                if head is None:
                    unplaceable.add(_shape(job.spec))
            if head is not None and head.job is job:
                decision.head, decision.expected_start = True, head.shadow
                decision.reason = _join(error.reason, head.describe())
                if error.kind == "busy":
                    head = _preempt_for(decision, head, state, holdings, quotas, now) or head
            else:
                decision.reason = _join(error.reason, f"behind #{head.job.id}" if head is not None else "")
            continue
        assert plan is not None
        if head is None:
            start(decision, plan)
            continue
        same = quotas.get(job.project_id) if job.project_id == head.job.project_id else None
        why = head.admits(plan, expected_end(job.spec.time_limit, now), same_project_quota=same,
                          held=held.get(job.project_id, (0, 0)), need=decision.need)
        if why is not None:
            decision.blocked_by, decision.reason = HEAD, f"fits now, but would delay #{head.job.id} (first in line): {why}"
            continue
        decision.backfill = True
        start(decision, plan, reason=f"starting ahead of #{head.job.id}, which it cannot delay (backfill)")

    for decision, over in borrowers:
        job, decision.borrowing = decision.job, True
        # What the project holds now, the jobs within its quota started.
        over = over_quota(quotas.get(job.project_id), held.get(job.project_id, (0, 0)), decision.need) or over
        plan, error = attempt(job.spec)
        if plan is None:
            decision.blocked_by = QUOTA
            decision.reason = _join(error.reason if error else "", f"{over}: it may borrow idle capacity, when some fits it")
            continue
        why = head.admits(plan, expected_end(job.spec.time_limit, now)) if head is not None else None
        if why is not None:
            decision.blocked_by = QUOTA
            decision.reason = f"{over}: it may borrow idle capacity, but would delay #{head.job.id} (first in line): {why}" \
                if head is not None else over
            continue
        decision.backfill = head is not None
        start(decision, plan, reason=f"starting beyond project {job.project}'s quota on idle capacity (borrowing)")
    return decisions


def _preempt_for(decision: Decision, head: Reservation, state: dict[int, Candidate], holdings: list[Holding],
                 quotas: dict[int, Quota], now: float) -> Reservation | None:
    """Choose the victims the head needs (choose_victims) and say so in its reason. The victims then
    count as ending within their grace, and the head's reservation is taken again on that: no
    backfill takes the room they free. Returns the new reservation (None: unchanged)."""
    job = decision.job
    victims = choose_victims(job, state, holdings, quotas)
    if victims is None:
        return _wait_for_protected(decision, state, holdings, quotas, now)
    if not victims:
        yielding = sorted(h.job_id for h in holdings if h.status == J.PREEMPTING)
        decision.reason = _join(decision.reason.split("; first in line")[0],
                                f"first in line: waiting for {_names(yielding)} to checkpoint and yield (preempted)")
        return None
    decision.victims = victims
    chosen = {h.job_id for h in victims}
    for index, holding in enumerate(holdings):
        if holding.job_id in chosen:
            holdings[index] = replace(holding, status=J.PREEMPTING,
                                      ends_at=min(holding.ends_at or float("inf"), now + holding.grace))
    decision.reason = _join(decision.reason.split("; first in line")[0],
                            f"first in line: preempting {_names(sorted(chosen))} to make room")
    reservation = reserve(job, state, holdings, now)
    if reservation is not None:
        reservation.waits_for = sorted(chosen)
    return reservation


def _wait_for_protected(decision: Decision, state: dict[int, Candidate], holdings: list[Holding],
                        quotas: dict[int, Quota], now: float) -> Reservation | None:
    """No victim may be preempted now, but jobs resumed after a preemption would do once they have run
    their minimum (PREEMPTION_MIN_RUN): the head waits for that, saying so, and they count as ending
    then (within their grace), so that nothing backfills onto the room it will take."""
    unprotected = [replace(h, protected_for=0.0) for h in holdings]
    later = choose_victims(decision.job, state, unprotected, quotas)
    if not later:
        return None
    chosen = {v.job_id for v in later}
    protected = sorted(h.job_id for h in holdings if h.job_id in chosen and h.protected_for > 0)
    when = max(h.protected_for for h in holdings if h.job_id in chosen)  # all of them, together
    for index, holding in enumerate(holdings):
        if holding.job_id in chosen:
            holdings[index] = replace(holding, ends_at=min(holding.ends_at or float("inf"), now + when + holding.grace))
    decision.reason = _join(decision.reason.split("; first in line")[0], (
        f"first in line: {_names(protected)} resumed after a preemption and may be preempted again "
        f"{_in(when)} (a resumed job runs {settings.PREEMPTION_MIN_RUN:g} s first)"))
    reservation = reserve(decision.job, state, holdings, now)
    if reservation is not None:
        reservation.waits_for, decision.expected_start = sorted(chosen), reservation.shadow
    return reservation


def borrowing_jobs(holdings: list[Holding], quotas: dict[int, Quota]) -> set[int]:
    """The live jobs beyond their project's quota: in the order they were placed, each job that the
    quota still has room for counts within it, the others borrow (what preemption takes back first)."""
    borrowing: set[int] = set()
    counted: dict[int, tuple[int, int]] = {}
    for holding in sorted(holdings, key=lambda h: (h.order, h.job_id)):
        quota = quotas.get(holding.project_id)
        if quota is None:
            continue
        so_far = counted.get(holding.project_id, (0, 0))
        if over_quota(quota, so_far, holding.need):
            borrowing.add(holding.job_id)
        else:
            counted[holding.project_id] = (so_far[0] + holding.need[0], so_far[1] + holding.need[1])
    return borrowing


# --- the database's view ----------------------------------------------------------------------------
@dataclass
class Snapshot:
    waiting: list[Waiting]
    machines: list[Candidate]
    holdings: list[Holding]
    quotas: dict[int, Quota]
    now: float


def queued_jobs() -> list[Waiting]:
    """Every queued job, in queue order."""
    rows = Job.objects.filter(status__in=JOB_WAITING).order_by("-priority", "created_at", "id").values_list(
        "id", "name", "spec", "priority", "project_id", "project__name", "owner__username", "created_at", "queued_at",
        "status_reason", "status")
    # Each spec read into its value once, for the whole pass.
    return [Waiting(job_id, name, JobSpec.from_json(spec), *rest) for job_id, name, spec, *rest in rows]


def live_holdings(now: float) -> list[Holding]:
    """What every job with live nodes holds, and when each is expected to let go."""
    nodes: dict[int, Nodes] = {}
    first: dict[int, int] = {}
    since: dict[int, float] = {}  # when the current attempt's nodes started running
    for node_id, job_id, machine_id, gpus, procs, node_started in JobNode.objects.filter(
            status__in=NODE_LIVE, machine__isnull=False).order_by("id").values_list(
            "id", "job_id", "machine_id", "gpus", "nproc", "started_at"):
        nodes.setdefault(job_id, []).append((machine_id, tuple(gpus or ()), int(procs)))
        first.setdefault(job_id, node_id)
        if node_started is not None:
            since[job_id] = min(since.get(job_id, now), node_started.timestamp())
    checkpoints = last_checkpoint_times(list(nodes)) if nodes else {}
    holdings = []
    min_run = float(settings.PREEMPTION_MIN_RUN)
    for (job_id, project_id, status, limit, eta, started, priority, borrowing, pinned, preemption,
         resumed) in Job.objects.filter(pk__in=list(nodes)).values_list(
            "id", "project_id", "status", "spec__time_limit", "progress__eta_seconds", "started_at", "priority",
            "borrowing", "spec__preemptible", "spec__preemption", "plan__after_preemption"):
        ends_at = expected_end(limit, now, started.timestamp() if started else None,
                               eta if status == J.RUNNING else None)
        grace = grace_of(preemption)
        if status == J.STOPPING:
            ends_at = min(ends_at or float("inf"), now + float(settings.STOP_TIMEOUT))
        elif status == J.PREEMPTING:
            ends_at = min(ends_at or float("inf"), now + grace)
        # Work a preemption would lose: since the last committed checkpoint, or since this attempt
        # started (it resumed from the one before).
        lost = now - max(checkpoints.get(job_id, 0.0), since.get(job_id, now))
        # Resumed after a preemption: not preempted again before this attempt has run min_run seconds
        # (from its nodes running; until then it is not running and no victim anyway).
        protected = max(min_run - (now - since[job_id]), 0.0) if resumed is True and job_id in since else 0.0
        holdings.append(Holding(job_id, project_id, ends_at, nodes[job_id], priority, first[job_id], borrowing,
                                status=status, preemptible=pinned is not False, lost_work=max(lost, 0.0),
                                grace=grace, protected_for=protected))
    return holdings


def snapshot() -> Snapshot:
    now = time.time()
    return Snapshot(queued_jobs(), machine_candidates(), live_holdings(now), project_quotas(), now)


def queue_preview() -> list[Decision]:
    """What a pass would decide now (GET /api/queue): read only, no lock."""
    snap = snapshot()
    return evaluate(snap.waiting, snap.machines, snap.holdings, snap.quotas, now=snap.now)


# --- what the API and the streams show -------------------------------------------------------------
def queue_entries(decisions: list[Decision], *, renumber: bool = False) -> list[QueuedJob]:
    """The queue as JSON-able entries (QueueEntryOut's shape), positions from 1 in queue order."""
    entries: list[QueuedJob] = []
    for index, d in enumerate(decisions, 1):
        job = d.job
        entries.append({
            "id": job.id, "name": job.name, "project": job.project, "owner": job.owner, "status": job.status,
            "priority": job.priority, "position": index if renumber else d.position,
            "reason": d.reason, "blocked_by": d.blocked_by, "head": d.head, "borrowing": d.borrowing,
            "backfill": d.backfill,
            # To the minute: an ETA that moves by seconds does not make a new queue for every dashboard.
            "expected_start": (dt.datetime.fromtimestamp(d.expected_start // 60 * 60 + 60, tz=dt.UTC).isoformat()
                               if d.expected_start is not None else None),
            "submitted_at": job.created_at.isoformat(),
            "waiting_since": (job.queued_at or job.created_at).isoformat(),
            "gpus": d.need[0], "processes": d.need[1],
        })
    return entries

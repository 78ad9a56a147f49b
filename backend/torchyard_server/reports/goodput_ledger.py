"""Goodput splits (reports/goodput.py) of real jobs, the goodput ledger of ended jobs (usage.models.
JobGoodput) and the roll-ups over it: per project, user or machine, with GPU-hours and what they cost
at the machines' prices.

An ended job is split once its last events are in (SETTLE after it ended) and kept in the ledger,
which outlives the job like the usage ledger does; a live job, or one that ended a moment ago, is
split when asked. The ledger is filled by whoever reads it first: a roll-up folds in every job it
counts, a /metrics scrape a few at a time, so nothing runs in the background for it."""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict

from django.db import IntegrityError, transaction
from django.db.models import Q, QuerySet

from ..jobs.models import Job, JobNode
from ..jobs.states import JOB_FINAL, JOB_LIVE
from ..machines.models import Machine
from ..usage.models import JobGoodput, LedgerAttempt, NodeUsage
from ..usage.selectors import goodput_seconds_by_project
from ..usage.services import goodput_record
from .goodput import CATEGORIES, PREEMPTED, PRODUCTIVE, QUEUED, RULES, JobSplit, empty_parts, job_goodput
from .goodput_facts import job_facts

log = logging.getLogger(__name__)

# An ended job's last events may still be on their way (the ingest's batches, a node's buffer).
SETTLE = dt.timedelta(seconds=60)
FOLD_BATCH = 50
# What a /metrics scrape folds at most before it answers: a first scrape over a long history
# catches up over a few scrapes (the counters grow meanwhile), never past a scrape's timeout.
SCRAPE_FOLD_SECONDS = 2.0
SCRAPE_FOLD_JOBS = 200
# by= -> what names a roll-up's rows (as GET /api/usage groups).
GROUPS = ("project", "user", "machine")
# Waiting for machines is no machine's time: a roll-up by machine leaves it out.
UNPLACED = (QUEUED, PREEMPTED)


def _moment(epoch: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(epoch, tz=dt.UTC)


def job_splits(jobs: list[Job], *, now: dt.datetime) -> dict[int, JobSplit]:
    return {job_id: job_goodput(facts) for job_id, facts in job_facts(jobs, now=now).items()}


def job_split(job: Job, *, now: dt.datetime) -> JobSplit:
    """The job's split now; an ended job's goes into the ledger as well, once it has settled."""
    split = job_splits([job], now=now)[job.pk]
    if _settled(job, now) and not JobGoodput.objects.filter(job_id=job.pk, rules=RULES).exists():
        _record([job], {job.pk: split}, _machines([job.pk]))
    return split


def _settled(job: Job, now: dt.datetime) -> bool:
    return job.status in JOB_FINAL and job.finished_at is not None and job.finished_at < now - SETTLE


def _machines(job_ids: list[int]) -> dict[tuple[int, int], list[str]]:
    """The machines each attempt's nodes were placed on, by (job, attempt)."""
    machines: dict[tuple[int, int], set[str]] = defaultdict(set)
    for job_id, attempt, name in JobNode.objects.filter(job_id__in=job_ids).values_list("job_id", "attempt",
                                                                                          "machine_name"):
        machines[(job_id, attempt)].add(name)
    return {key: sorted(names) for key, names in machines.items()}


def _attempts_json(job_id: int, split: JobSplit, machines: dict[tuple[int, int], list[str]]) -> list[LedgerAttempt]:
    return [{"attempt": a.attempt, "start": a.start, "end": a.end, "parts": a.parts,
             "machines": machines.get((job_id, a.attempt), [])} for a in split.attempts]


def _record(jobs: Iterable[Job], splits: dict[int, JobSplit], machines: dict[tuple[int, int], list[str]]) -> int:
    written = 0
    for job in jobs:
        split = splits[job.pk]
        try:
            # A savepoint: another process folding the same job at once wins, and this one goes on.
            with transaction.atomic():
                goodput_record(job_id=job.pk, job_name=job.name, user_id=job.owner_id, username=job.owner.username,
                               project_id=job.project_id, project_name=job.project.name, created_at=job.created_at,
                               finished_at=job.finished_at or _moment(split.end), wall_seconds=split.wall,
                               parts=split.parts, attempts=_attempts_json(job.pk, split, machines), rules=RULES)
            written += 1
        except IntegrityError:
            continue
    return written


def goodput_fold(*, scope: QuerySet[Job] | None = None, now: dt.datetime, max_jobs: int | None = None,
                 max_seconds: float | None = None) -> int:
    """Split the ended, settled jobs (of `scope`) that the ledger lacks (or holds by older rules),
    oldest first, and record them; at most `max_jobs`, and no new batch after `max_seconds`. Returns
    how many were recorded."""
    pending = (scope if scope is not None else Job.objects.all()).filter(
        status__in=JOB_FINAL, finished_at__lt=now - SETTLE).exclude(
        pk__in=JobGoodput.objects.filter(rules=RULES).values("job_id"))
    began, folded = time.monotonic(), 0
    while max_jobs is None or folded < max_jobs:
        size = FOLD_BATCH if max_jobs is None else min(FOLD_BATCH, max_jobs - folded)
        jobs = list(pending.select_related("owner", "project").order_by("finished_at", "id")[:size])
        if not jobs:
            break
        splits: dict[int, JobSplit] = {}
        for job_id, facts in job_facts(jobs, now=now).items():
            try:
                splits[job_id] = job_goodput(facts)
            except Exception:  # one job's odd history must not hold up every later one's
                log.exception("goodput: job %s could not be split; it is left out of the ledger", job_id)
        recorded = _record([job for job in jobs if job.pk in splits], splits, _machines([job.pk for job in jobs]))
        folded += len(jobs)
        if len(jobs) < size or not recorded or (max_seconds is not None and time.monotonic() - began > max_seconds):
            break
    return folded


def goodput_counters(*, now: dt.datetime) -> dict[str, dict[str, float]]:
    """What /metrics counts: seconds per project and category over the ended jobs, after folding a
    few more into the ledger."""
    goodput_fold(now=now, max_jobs=SCRAPE_FOLD_JOBS, max_seconds=SCRAPE_FOLD_SECONDS)
    return goodput_seconds_by_project()


# --- roll-ups -------------------------------------------------------------------------------------
@dataclass
class _Counted:
    """One job of a roll-up: its names, its split, and each attempt's split with its machines."""

    job_id: int
    project: str
    user: str
    wall: float
    parts: dict[str, float]
    attempts: list[LedgerAttempt]


class RollupRow(TypedDict):
    """A row of a goodput roll-up (GoodputRollupRowOut)."""

    key: str  # the project's, user's or machine's name; "all" for the overall row
    jobs: int
    wall_seconds: float
    goodput: float  # training / wall_seconds
    parts: dict[str, float]  # {category: seconds}
    gpu_hours: float
    productive_gpu_hours: float
    cost: float | None  # null: none of its nodes ran on a priced machine
    wasted_cost: float | None


class GoodputRollup(TypedDict):
    """GET /api/usage/goodput (GoodputRollupOut)."""

    by: str
    since: dt.datetime
    until: dt.datetime
    rows: list[RollupRow]
    overall: RollupRow


class MachinePrices(TypedDict):
    """What a node's cost is reckoned from: its machine's prices, and the GPUs and CPUs its
    capabilities report (null: none reported; read defensively, anything but a positive count is none)."""

    price_per_gpu_hour: float | None
    price_per_machine_hour: float | None
    gpu_count: int | None
    cpu_count: int | None


@dataclass
class _Row:
    key: str
    jobs: set[int] = field(default_factory=set)
    parts: dict[str, float] = field(default_factory=empty_parts)
    gpu_seconds: float = 0.0
    productive_gpu_seconds: float = 0.0
    cost: float | None = None
    productive_cost: float = 0.0

    def add_parts(self, parts: dict[str, float], leave_out: tuple[str, ...] = ()) -> None:
        for category in CATEGORIES:
            if category not in leave_out:
                self.parts[category] += float(parts.get(category) or 0.0)

    def add_node(self, gpu_seconds: float, productive_seconds: float, gpus: int, cost: float | None,
                 seconds: float) -> None:
        self.gpu_seconds += gpu_seconds
        self.productive_gpu_seconds += productive_seconds * gpus
        if cost is not None:
            self.cost = (self.cost or 0.0) + cost
            self.productive_cost += cost * productive_seconds / seconds if seconds > 0 else 0.0

    def out(self) -> RollupRow:
        wall = sum(self.parts.values())
        return {
            "key": self.key, "jobs": len(self.jobs), "wall_seconds": round(wall, 3),
            "goodput": round(self.parts[PRODUCTIVE] / wall, 6) if wall > 0 else 0.0,
            "parts": {c: round(s, 3) for c, s in self.parts.items()},
            "gpu_hours": round(self.gpu_seconds / 3600, 6),
            "productive_gpu_hours": round(self.productive_gpu_seconds / 3600, 6),
            "cost": None if self.cost is None else round(self.cost, 4),
            "wasted_cost": None if self.cost is None else round(max(self.cost - self.productive_cost, 0.0), 4),
        }


def node_cost(*, gpus: int, processes: int, seconds: float, machine: MachinePrices | None) -> float | None:
    """What a node's time cost at its machine's prices: its GPUs at the GPU-hour price, and its share
    of the machine-hour price (its GPUs of the machine's, or its processes of its CPUs); None when the
    machine has no price (or is gone)."""
    if machine is None:
        return None
    per_gpu, per_machine = machine["price_per_gpu_hour"], machine["price_per_machine_hour"]
    if per_gpu is None and per_machine is None:
        return None
    hours = seconds / 3600
    cost = per_gpu * gpus * hours if per_gpu is not None else 0.0
    if per_machine is not None:
        gpu_count, cpu_count = _count(machine.get("gpu_count")), _count(machine.get("cpu_count"))
        if gpus and gpu_count:
            share = min(gpus / gpu_count, 1.0)
        else:
            share = min(processes / cpu_count, 1.0) if cpu_count else 1.0
        cost += per_machine * hours * share
    return cost


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _counted_jobs(*, since: dt.datetime, now: dt.datetime, project_ids: set[int] | None,
                  project: str | None) -> list[_Counted]:
    """The jobs a roll-up counts: those that ended since `since` (from the ledger, folded in first)
    and the live ones (split now)."""
    scope = Job.objects.all()
    entries = JobGoodput.objects.filter(finished_at__gte=since)
    if project_ids is not None:
        scope, entries = scope.filter(project_id__in=project_ids), entries.filter(project_id__in=project_ids)
    if project:
        scope, entries = scope.filter(project__name=project), entries.filter(project_name=project)
    goodput_fold(scope=scope.filter(finished_at__gte=since), now=now)
    # Folded just now by these rules, but for the jobs purged since older rules split them: those stay as they are.
    counted = [_Counted(e.job_id, e.project_name, e.username, e.wall_seconds, e.parts, e.attempts)
               for e in entries.order_by()]
    recorded = {c.job_id for c in counted}
    fresh = [job for job in scope.filter(Q(status__in=JOB_LIVE) | Q(finished_at__gte=since))
             .select_related("owner", "project").order_by("id") if job.pk not in recorded]
    splits, machines = job_splits(fresh, now=now), _machines([job.pk for job in fresh])
    for job in fresh:
        split = splits[job.pk]
        counted.append(_Counted(job.pk, job.project.name, job.owner.username, split.wall, split.parts,
                                _attempts_json(job.pk, split, machines)))
    return counted


def goodput_rollup(*, by: str, since: dt.datetime, now: dt.datetime, project_ids: set[int] | None = None,
                   project: str | None = None) -> GoodputRollup:
    """Goodput per project, user or machine over the jobs that ended since `since` or still run,
    each counted whole: its wall time's parts, its nodes' GPU-hours, and what they cost. By machine,
    each attempt counts for every machine it had a node on, without its waits for machines."""
    counted = _counted_jobs(since=since, now=now, project_ids=project_ids, project=project)
    rows: dict[str, _Row] = {}
    overall = _Row("all")

    def row(key: str) -> _Row:
        return rows.setdefault(key, _Row(key))

    training: dict[tuple[int, int], float] = {}
    for job in counted:
        overall.jobs.add(job.job_id)
        overall.add_parts(job.parts)
        for attempt in job.attempts:
            training[(job.job_id, attempt["attempt"])] = float(attempt["parts"].get(PRODUCTIVE) or 0.0)
            if by == "machine":
                for name in attempt.get("machines") or []:
                    row(name).jobs.add(job.job_id)
                    row(name).add_parts(attempt["parts"], leave_out=UNPLACED)
        if by != "machine":
            key = job.project if by == "project" else job.user
            row(key).jobs.add(job.job_id)
            row(key).add_parts(job.parts)
    names = {job.job_id: (job.project, job.user) for job in counted}
    nodes = list(NodeUsage.objects.filter(job_id__in=list(names)).order_by().values_list(
        "job_id", "attempt", "machine_id", "machine_name", "gpus", "processes", "started_at", "ended_at",
        "gpu_seconds"))
    machines: dict[int, MachinePrices] = {pk: {"price_per_gpu_hour": per_gpu, "price_per_machine_hour": per_machine, "gpu_count": gpu_count,
                     "cpu_count": cpu_count}
                for pk, per_gpu, per_machine, gpu_count, cpu_count in Machine.objects.filter(
                    pk__in={n[2] for n in nodes if n[2]}).values_list(
                    "pk", "price_per_gpu_hour", "price_per_machine_hour", "capabilities__gpu_count",
                    "capabilities__cpu_count")}
    for job_id, attempt, machine_id, machine_name, gpus, processes, started, ended, gpu_seconds in nodes:
        seconds = max(((ended or now) - started).total_seconds(), 0.0)
        if ended is None:
            gpu_seconds = gpus * seconds
        productive = min(training.get((job_id, attempt), 0.0), seconds)
        cost = node_cost(gpus=gpus, processes=processes, seconds=seconds, machine=machines.get(machine_id))
        project_name, username = names[job_id]
        key = {"project": project_name, "user": username, "machine": machine_name}[by]
        row(key).add_node(gpu_seconds, productive, gpus, cost, seconds)
        overall.add_node(gpu_seconds, productive, gpus, cost, seconds)
    ordered = sorted(rows.values(), key=lambda r: (-sum(r.parts.values()), -r.gpu_seconds, r.key))
    return {"by": by, "since": since, "until": now, "rows": [r.out() for r in ordered], "overall": overall.out()}

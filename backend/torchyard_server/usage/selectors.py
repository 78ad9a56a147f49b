"""Reads of the usage ledger: GPU- and process-hours per project, user or machine over a window,
totals and series in buckets (the API), and all-time totals per project (the /metrics counters).

A row open now (its node still runs) counts up to now; a row is cut at the window's edges, so a
node that ran across midnight counts in both days."""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from typing import NotRequired, TypedDict

from django.db.models import Q, Sum
from django.utils import timezone

from .models import JobGoodput, NodeUsage

# by= -> the ledger's column that names it.
GROUPS = {"project": "project_name", "user": "username", "machine": "machine_name"}
BUCKETS = {"hour": 3600, "day": 86400}
# The most buckets one answer carries (a year by day, three months by hour).
MAX_BUCKETS = 2500


class UsageTotal(TypedDict):
    key: str  # the project's, user's or machine's name
    gpu_seconds: float
    gpu_hours: float
    process_seconds: float
    process_hours: float
    nodes: int  # nodes that ran in the window


class UsageSeries(TypedDict):
    key: str
    gpu_hours: list[float]  # one per bucket
    process_hours: list[float]


class UsageReport(TypedDict):
    """GET /api/usage (UsageOut)."""

    by: str
    since: dt.datetime
    until: dt.datetime
    bucket: str | None
    totals: list[UsageTotal]  # most GPU-hours first
    buckets: NotRequired[list[dt.datetime]]  # with a bucket: each one's start
    series: NotRequired[list[UsageSeries]]  # with a bucket: one per key, in the totals' order


def _align(moment: dt.datetime, seconds: int) -> dt.datetime:
    """The start of the bucket holding `moment` (UTC hours and days)."""
    epoch = moment.timestamp()
    return dt.datetime.fromtimestamp(epoch - epoch % seconds, tz=dt.UTC)


def bucket_count(since: dt.datetime, until: dt.datetime, bucket: str) -> int:
    step = BUCKETS[bucket]
    first = _align(since, step)
    return max(1, int(-(-(until - first).total_seconds() // step)))


def usage_report(*, by: str, since: dt.datetime, until: dt.datetime, bucket: str | None = None,
                 project_ids: set[int] | None = None, project: str | None = None,
                 now: dt.datetime | None = None) -> UsageReport:
    """GPU- and process-seconds held between `since` and `until`, grouped `by` project, user or
    machine: totals, and with `bucket` a series per group (aligned with `buckets`, zeros included).
    `project_ids`: only rows of these projects (None: all, for staff)."""
    now = now or timezone.now()
    column = GROUPS[by]
    rows = NodeUsage.objects.filter(started_at__lt=until).filter(Q(ended_at=None) | Q(ended_at__gt=since))
    if project_ids is not None:
        rows = rows.filter(project_id__in=project_ids)
    if project:
        rows = rows.filter(project_name=project)
    step = BUCKETS[bucket] if bucket else 0
    first = _align(since, step) if step else since
    count = bucket_count(since, until, bucket) if bucket else 0
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    series: dict[str, list[list[float]]] = {}
    for key, gpus, processes, started, ended in rows.order_by().values_list(
            column, "gpus", "processes", "started_at", "ended_at").iterator(chunk_size=2000):
        start, end = max(started, since), min(ended or now, until)
        if end <= start:
            continue
        seconds = (end - start).total_seconds()
        total = totals[key]
        total[0] += gpus * seconds
        total[1] += processes * seconds
        total[2] += 1
        if step:
            points = series.setdefault(key, [[0.0] * count, [0.0] * count])
            index = int((start - first).total_seconds() // step)
            while start < end and index < count:
                edge = min(end, first + dt.timedelta(seconds=step * (index + 1)))
                part = (edge - start).total_seconds()
                points[0][index] += gpus * part
                points[1][index] += processes * part
                start, index = edge, index + 1
    ordered = sorted(totals.items(), key=lambda item: (-item[1][0], -item[1][1], item[0]))
    answer: UsageReport = {
        "by": by, "since": since, "until": until, "bucket": bucket,
        "totals": [{"key": key, "gpu_seconds": round(g, 3), "gpu_hours": round(g / 3600, 6),
                    "process_seconds": round(p, 3), "process_hours": round(p / 3600, 6), "nodes": int(n)}
                   for key, (g, p, n) in ordered],
    }
    if step:
        answer["buckets"] = [first + dt.timedelta(seconds=step * i) for i in range(count)]
        answer["series"] = [{"key": key, "gpu_hours": [round(v / 3600, 6) for v in series[key][0]],
                             "process_hours": [round(v / 3600, 6) for v in series[key][1]]}
                            for key, _ in ordered]
    return answer


def usage_seconds_by_project(*, now: dt.datetime | None = None) -> dict[str, tuple[float, float]]:
    """Every project's GPU- and process-seconds since the ledger began, open rows up to now: what
    the /metrics counters say. Closed rows are summed by the database; the open ones (as many as
    nodes run now) here."""
    now = now or timezone.now()
    totals: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    closed = (NodeUsage.objects.exclude(ended_at=None).order_by().values("project_name")
              .annotate(gpu=Sum("gpu_seconds"), proc=Sum("process_seconds")))
    for row in closed:
        totals[row["project_name"]][0] += row["gpu"] or 0.0
        totals[row["project_name"]][1] += row["proc"] or 0.0
    for name, gpus, processes, started in NodeUsage.objects.filter(ended_at=None).values_list(
            "project_name", "gpus", "processes", "started_at"):
        seconds = max((now - started).total_seconds(), 0.0)
        totals[name][0] += gpus * seconds
        totals[name][1] += processes * seconds
    return {name: (g, p) for name, (g, p) in totals.items()}


def goodput_seconds_by_project() -> dict[str, dict[str, float]]:
    """Every project's seconds per goodput category over the jobs in the goodput ledger (the ended
    ones): what the /metrics counters say."""
    totals: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for name, parts in JobGoodput.objects.order_by().values_list("project_name", "parts").iterator(chunk_size=2000):
        for category, seconds in (parts or {}).items():
            totals[name][category] += float(seconds)
    return {name: dict(parts) for name, parts in totals.items()}

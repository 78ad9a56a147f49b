"""A job's metrics read back from its events, summarized and downsampled in the database.

Metric events hold whatever numbers a script reported (`sdk.report(step=..., loss=...)`) in their
JSON payload. A series is cut into buckets of equal step ranges on one grid; every bucket keeps the
minimum and the maximum of every value reported in it (any rank), besides the mean and the count,
so a spike survives however far the series is zoomed out: a chart draws the min-max band.

The grouping runs in SQL on PostgreSQL (jsonb) and SQLite (JSON1) alike: only one row per bucket
leaves the database, whatever the number of events.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, TypedDict

from django.db import NotSupportedError, connection
from django.db.models import Aggregate, Avg, Count, F, FloatField, Func, Max, Min, Q, QuerySet
from django.db.models.functions import Floor

from .models import JobEvent

# Numbers that ride on metric events without being a series of their own.
NOT_SERIES = frozenset({"step", "dropped", "total_steps"})
MAX_POINTS = 5000


class JsonNumber(Func):
    """The number at `key` of a JSON column, or NULL when it is absent or not a number (the SDK sends
    a value it cannot convert as a string): a cast alone would fail on PostgreSQL."""

    output_field = FloatField()

    def __init__(self, expression: Any, key: str) -> None:
        super().__init__(expression)
        self.key = key

    def as_postgresql(self, compiler, connection, **extra):
        column, params = compiler.compile(self.source_expressions[0])
        sql = f"(CASE WHEN jsonb_typeof({column} -> %s) = 'number' THEN ({column} ->> %s)::double precision END)"
        return sql, (*params, self.key, *params, self.key)

    def as_sqlite(self, compiler, connection, **extra):
        column, params = compiler.compile(self.source_expressions[0])
        path = "$." + json.dumps(self.key)  # quoted: any key, dots and brackets included
        sql = f"(CASE WHEN json_type({column}, %s) IN ('integer', 'real') THEN json_extract({column}, %s) END)"
        return sql, (*params, path, *params, path)

    def as_sql(self, compiler, connection, **extra):
        raise NotSupportedError(f"metrics are read on PostgreSQL and SQLite only, not {connection.vendor}")


def metric_events(*, job_id: int, attempt: int | None = None, rank: int | None = None) -> QuerySet[JobEvent]:
    qs = JobEvent.objects.filter(job_id=job_id, type=JobEvent.Type.METRIC)
    if attempt is not None:
        qs = qs.filter(attempt=attempt)
    if rank is not None:
        qs = qs.filter(rank=rank)
    return qs


def metric_names(*, job_id: int, attempt: int | None = None) -> list[str]:
    """Every name the job (or one attempt) reported a number for, sorted."""
    table = JobEvent._meta.db_table
    where, params = "e.job_id = %s AND e.type = %s", [job_id, str(JobEvent.Type.METRIC)]
    if attempt is not None:
        where += " AND e.attempt = %s"
        params.append(attempt)
    if connection.vendor == "postgresql":
        sql = (f"SELECT DISTINCT kv.key FROM {table} e, jsonb_each(e.payload) kv "
               f"WHERE {where} AND jsonb_typeof(kv.value) = 'number'")
    elif connection.vendor == "sqlite":
        sql = (f"SELECT DISTINCT kv.key FROM {table} e, json_each(e.payload) kv "
               f"WHERE {where} AND kv.type IN ('integer', 'real')")
    else:
        raise NotSupportedError(f"metrics are read on PostgreSQL and SQLite only, not {connection.vendor}")
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return sorted(key for (key,) in cursor.fetchall() if key not in NOT_SERIES)


@dataclass(frozen=True)
class StepGrid:
    """Buckets `[from_step + k * bucket_steps, from_step + (k + 1) * bucket_steps)`, k = 0 .. buckets - 1."""

    from_step: int
    to_step: int
    bucket_steps: int

    @property
    def buckets(self) -> int:
        return (self.to_step - self.from_step) // self.bucket_steps + 1


def step_bounds(events: QuerySet[JobEvent], names: list[str], *, from_step: int | None = None,
                to_step: int | None = None) -> tuple[int, int] | None:
    """The first and last step at which any of `names` was reported, within the bounds given;
    None when there is none."""
    seen = _with_any(events.annotate(step_value=JsonNumber(F("payload"), "step")), names)
    if from_step is not None:
        seen = seen.filter(step_value__gte=from_step)
    if to_step is not None:
        seen = seen.filter(step_value__lte=to_step)
    bounds = seen.aggregate(first=Min("step_value"), last=Max("step_value"))
    if bounds["first"] is None:
        return None
    return int(bounds["first"]), int(bounds["last"])


def grid_over(from_step: int, to_step: int, points: int) -> StepGrid:
    """At most `points` buckets of equal whole steps covering [from_step, to_step]."""
    points = max(1, min(points, MAX_POINTS))
    return StepGrid(from_step, to_step, max(1, math.ceil((to_step - from_step + 1) / points)))


def step_grid(events: QuerySet[JobEvent], names: list[str], *, from_step: int | None, to_step: int | None,
              points: int) -> StepGrid | None:
    """The grid over [from_step, to_step]; a bound not given is the first or last step at which any
    of `names` was reported. None when there is nothing in the range."""
    if from_step is None or to_step is None:
        bounds = step_bounds(events, names, from_step=from_step, to_step=to_step)
        if bounds is None:
            return None
        from_step = bounds[0] if from_step is None else from_step
        to_step = bounds[1] if to_step is None else to_step
    if to_step < from_step:
        return None
    return grid_over(from_step, to_step, points)


def _with_any(qs: QuerySet, names: list[str]) -> QuerySet:
    """Rows where the step and at least one of `names` are numbers."""
    qs = qs.filter(step_value__isnull=False)
    if not names:
        return qs.none()
    values = {f"_has_{i}": JsonNumber(F("payload"), name) for i, name in enumerate(names)}
    condition = Q()
    for alias in values:
        condition |= Q(**{f"{alias}__isnull": False})
    return qs.annotate(**values).filter(condition)


class MetricBucket(TypedDict):
    """A bucket of one series (MetricBucketOut)."""

    step: int  # the bucket's first step on the grid
    first_step: int  # the steps seen in it
    last_step: int
    min: float
    max: float
    mean: float
    count: int


class MetricSeries(TypedDict):
    """One metric over one attempt, on the grid (MetricSeriesOut)."""

    name: str
    attempt: int
    buckets: list[MetricBucket]


class JobMetrics(TypedDict):
    """GET /api/jobs/{id}/metrics (JobMetricsOut)."""

    job: int
    names: list[str]
    from_step: int | None
    to_step: int | None
    bucket_steps: int | None
    series: list[MetricSeries]


class MetricSummary(TypedDict):
    """One metric over one attempt (MetricSummaryOut)."""

    last: float | None
    last_step: int | None
    min: float
    max: float
    mean: float
    count: int


class MetricFinal(TypedDict):
    """One metric's last value (and step), min and max over one attempt (metric_finals)."""

    last: float
    last_step: int | None
    min: float
    max: float


def bucketed(events: QuerySet[JobEvent], name: str, grid: StepGrid) -> dict[int, list[MetricBucket]]:
    """One series per attempt: for each bucket of the grid that holds a value of `name`, its
    `step` (the bucket's first step), `first_step`/`last_step` (the steps actually seen),
    `min`, `max`, `mean` and `count` (values over every rank)."""
    rows = (
        events.annotate(step_value=JsonNumber(F("payload"), "step"), value=JsonNumber(F("payload"), name))
        .filter(step_value__gte=grid.from_step, step_value__lte=grid.to_step, value__isnull=False)
        .annotate(bucket=Floor((F("step_value") - grid.from_step) / grid.bucket_steps))
        # order_by() replaces the model's ordering, which would otherwise join the GROUP BY.
        .values("attempt", "bucket")
        .order_by("attempt", "bucket")
        .annotate(low=Min("value"), high=Max("value"), mean=Avg("value"), count=Count("id"),
                  first_step=Min("step_value"), last_step=Max("step_value"))
    )
    series: dict[int, list[MetricBucket]] = {}
    for row in rows:
        series.setdefault(row["attempt"], []).append({
            "step": grid.from_step + int(row["bucket"]) * grid.bucket_steps,
            "first_step": int(row["first_step"]),
            "last_step": int(row["last_step"]),
            "min": row["low"],
            "max": row["high"],
            "mean": row["mean"],
            "count": row["count"],
        })
    return series


def metric_series(*, job_id: int, names: list[str] | None = None, attempt: int | None = None,
                  rank: int | None = None, from_step: int | None = None, to_step: int | None = None,
                  points: int = 500) -> JobMetrics:
    """The job's series of `names` (default: every name it reported), one per name and attempt (a
    resumed attempt repeats the steps after its checkpoint), downsampled onto one step grid."""
    available = metric_names(job_id=job_id, attempt=attempt)
    wanted = available if names is None else names
    events = metric_events(job_id=job_id, attempt=attempt, rank=rank)
    grid = step_grid(events, wanted, from_step=from_step, to_step=to_step, points=points)
    series: list[MetricSeries] = []
    if grid is not None:
        for name in wanted:
            for run_attempt, buckets in sorted(bucketed(events, name, grid).items()):
                series.append({"name": name, "attempt": run_attempt, "buckets": buckets})
    return {
        "job": job_id,
        "names": available,
        "from_step": grid.from_step if grid else from_step,
        "to_step": grid.to_step if grid else to_step,
        "bucket_steps": grid.bucket_steps if grid else None,
        "series": series,
    }


def metric_summary(*, job_id: int, attempt: int, names: list[str] | None = None) -> dict[str, MetricSummary]:
    """Per name, over one attempt: the last value reported (and its step), min, max, mean, count."""
    events = metric_events(job_id=job_id, attempt=attempt)
    names = metric_names(job_id=job_id, attempt=attempt) if names is None else names
    if not names:
        return {}
    values = {f"v{i}": JsonNumber(F("payload"), name) for i, name in enumerate(names)}
    aggregates: dict[str, Aggregate] = {}
    for alias in values:
        aggregates |= {f"{alias}_min": Min(alias), f"{alias}_max": Max(alias), f"{alias}_mean": Avg(alias),
                       f"{alias}_count": Count(alias)}
    totals = events.annotate(**values).aggregate(**aggregates)
    summary: dict[str, MetricSummary] = {}
    for alias, name in zip(values, names, strict=True):
        if not totals[f"{alias}_count"]:
            continue
        last = (events.annotate(value=JsonNumber(F("payload"), name), step_value=JsonNumber(F("payload"), "step"))
                .filter(value__isnull=False).order_by("-id").values("value", "step_value").first())
        summary[name] = {
            "last": last["value"] if last else None,
            "last_step": int(last["step_value"]) if last and last["step_value"] is not None else None,
            "min": totals[f"{alias}_min"],
            "max": totals[f"{alias}_max"],
            "mean": totals[f"{alias}_mean"],
            "count": totals[f"{alias}_count"],
        }
    return summary


def metric_finals(*, job_ids: list[int]) -> dict[tuple[int, int], dict[str, MetricFinal]]:
    """Per (job, attempt) of these jobs, per name: the last value reported (and its step), min and
    max. One query for them all (a window over the metric events of the jobs), so a list of runs
    costs one scan of their metric events, not a query per run and name."""
    if not job_ids:
        return {}
    table = JobEvent._meta.db_table
    if connection.vendor == "postgresql":
        pairs = f"{table} e, jsonb_each(e.payload) kv"
        value = "(kv.value #>> '{}')::double precision"
        step = "CASE WHEN jsonb_typeof(e.payload -> 'step') = 'number' THEN (e.payload ->> 'step')::double precision END"
        is_number = "jsonb_typeof(kv.value) = 'number'"
    elif connection.vendor == "sqlite":
        pairs = f"{table} e, json_each(e.payload) kv"
        value = "kv.value"
        step = "CASE WHEN json_type(e.payload, '$.step') IN ('integer', 'real') THEN json_extract(e.payload, '$.step') END"
        is_number = "kv.type IN ('integer', 'real')"
    else:
        raise NotSupportedError(f"metrics are read on PostgreSQL and SQLite only, not {connection.vendor}")
    series = "PARTITION BY e.job_id, e.attempt, kv.key"
    sql = (
        f"SELECT job_id, attempt, name, value, step, low, high FROM ("
        f"SELECT e.job_id AS job_id, e.attempt AS attempt, kv.key AS name, {value} AS value, {step} AS step, "
        f"ROW_NUMBER() OVER ({series} ORDER BY e.id DESC) AS newest, "
        f"MIN({value}) OVER ({series}) AS low, MAX({value}) OVER ({series}) AS high "
        f"FROM {pairs} WHERE e.job_id IN ({', '.join(['%s'] * len(job_ids))}) AND e.type = %s AND {is_number}"
        f") finals WHERE newest = 1"
    )
    finals: dict[tuple[int, int], dict[str, MetricFinal]] = {}
    with connection.cursor() as cursor:
        cursor.execute(sql, [*job_ids, str(JobEvent.Type.METRIC)])
        for job_id, attempt, name, last, step, low, high in cursor.fetchall():
            if name in NOT_SERIES:
                continue
            finals.setdefault((job_id, attempt), {})[name] = {
                "last": float(last), "last_step": int(step) if step is not None else None,
                "min": float(low), "max": float(high),
            }
    return finals

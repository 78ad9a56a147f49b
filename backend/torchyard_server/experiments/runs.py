"""Runs (DistroML's experiments): a run is one attempt of a job, named `<job id>.<attempt>`. It has
its job's spec and hyperparameters, its own nodes, metrics, checkpoints and artifacts; a job that
recovered twice made three runs. Nothing is stored for runs: they are read from jobs, nodes and
events, scoped to the projects the user may see like the jobs themselves."""

from __future__ import annotations

import datetime as dt
import re
from dataclasses import dataclass
from typing import Any, TypedDict

from rest_framework.exceptions import NotFound

from ..artifacts.models import Artifact
from ..checkpoints.models import CheckpointManifest
from ..jobs.models import Job, JobNode
from ..jobs.selectors import job_list, jobs_visible_to
from ..jobs.spec.secrets import public_spec
from ..jobs.states import NODE_LIVE
from ..streaming.metrics import (
    MetricBucket,
    MetricFinal,
    MetricSummary,
    bucketed,
    grid_over,
    metric_events,
    metric_finals,
    metric_names,
    metric_summary,
    step_bounds,
)

RUN_ID = re.compile(r"^(\d{1,18})\.(\d{1,9})$")
N = JobNode.Status
# Which way is better, for the names a script usually reports; a compare request may say otherwise.
LOWER_IS_BETTER = re.compile(r"loss|err|perplexity|ppl|mse|mae|rmse|latency|time", re.IGNORECASE)
HIGHER_IS_BETTER = re.compile(r"acc|f1|auc|precision|recall|bleu|rouge|score|reward|throughput|per_s", re.IGNORECASE)


class RunRow(TypedDict):
    """A run as every answer shows it (RunOut)."""

    run_id: str
    job: int
    attempt: int
    name: str
    project: str
    owner: str
    status: str
    status_reason: str
    world_size: int | None
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    hyperparameters: dict[str, Any]  # the spec's, as submitted: the user's own


class FinalMetric(TypedDict):
    """A metric's final and best value in a run (FinalMetricOut)."""

    name: str
    goal: str | None  # "min" or "max"
    last: float
    last_step: int | None
    best: float | None


class RunListed(RunRow):
    """GET /api/runs's rows (RunRowOut)."""

    final_metrics: list[FinalMetric]


class RunMetric(MetricSummary):
    name: str


class RunDetail(RunRow):
    """GET /api/runs/{run_id} (RunDetailOut): the rows are the serializer's to write out."""

    spec: dict[str, Any]  # the job's spec, secrets as ***
    nodes: list[JobNode]
    metrics: list[RunMetric]
    checkpoints: list[CheckpointManifest]
    artifacts: list[Artifact]


class HyperparameterRow(TypedDict):
    name: str  # nested hyperparameters dotted: optimizer.lr
    values: list[Any]  # one per run, as each run's spec gave it
    differs: bool


class ComparedValue(TypedDict):
    """One run's numbers for one metric; all null (count 0) where it never reported it."""

    last: float | None
    last_step: int | None
    min: float | None
    max: float | None
    mean: float | None
    count: int
    best: float | None


class ComparedMetric(TypedDict):
    name: str
    goal: str | None
    values: list[ComparedValue]  # one per run


class ComparedSeries(TypedDict):
    name: str
    runs: list[list[MetricBucket]]  # per run, its buckets on the shared grid


class RunsCompared(TypedDict):
    """POST /api/runs/compare (CompareOut)."""

    runs: list[RunRow]
    hyperparameters: list[HyperparameterRow]
    metrics: list[ComparedMetric]
    from_step: int | None
    to_step: int | None
    bucket_steps: int | None
    series: list[ComparedSeries]


@dataclass
class Run:
    job: Job
    attempt: int
    nodes: list[JobNode]

    @property
    def run_id(self) -> str:
        return f"{self.job.pk}.{self.attempt}"

    @property
    def current(self) -> bool:
        return self.attempt == self.job.attempt

    @property
    def status(self) -> str:
        """The job's status for its current attempt; an earlier attempt ended `failed` when one of its
        nodes failed or was lost (the job recovered from it), else `stopped` (interrupted)."""
        if self.current:
            return self.job.status
        if any(n.status in (N.FAILED, N.LOST) for n in self.nodes):
            return "failed"
        return "stopped"

    @property
    def status_reason(self) -> str:
        if self.current:
            return self.job.status_reason
        ended = [n for n in self.nodes if n.status in (N.FAILED, N.LOST)]
        return ended[0].status_reason if ended else ""

    @property
    def started_at(self):
        starts = [n.started_at for n in self.nodes if n.started_at]
        return min(starts) if starts else None

    @property
    def finished_at(self):
        if self.current:
            return self.job.finished_at
        if any(n.status in NODE_LIVE for n in self.nodes):
            return None
        ends = [n.finished_at for n in self.nodes if n.finished_at]
        return max(ends) if ends else None

    @property
    def world_size(self) -> int | None:
        return sum(n.nproc for n in self.nodes) or (self.job.world_size if self.current else None)

    @property
    def hyperparameters(self) -> dict[str, Any]:
        return dict((self.job.spec or {}).get("hyperparameters") or {})

    def as_row(self) -> RunRow:
        job = self.job
        return {
            "run_id": self.run_id, "job": job.pk, "attempt": self.attempt, "name": job.name,
            "project": job.project.name, "owner": job.owner.username, "status": self.status,
            "status_reason": self.status_reason, "world_size": self.world_size, "started_at": self.started_at,
            "finished_at": self.finished_at, "hyperparameters": self.hyperparameters,
        }


def _runs_of(jobs: list[Job]) -> list[Run]:
    """Every attempt of these jobs, newest first."""
    nodes: dict[tuple[int, int], list[JobNode]] = {}
    for node in JobNode.objects.filter(job_id__in=[j.pk for j in jobs]).order_by("node_rank"):
        nodes.setdefault((node.job_id, node.attempt), []).append(node)
    return [Run(job, attempt, nodes.get((job.pk, attempt), []))
            for job in jobs for attempt in range(job.attempt, -1, -1)]


def run_list(*, user: Any, job_id: int | None = None, project: str | None = None, status: str | None = None,
             limit: int = 200) -> list[Run]:
    """The runs of the jobs this user may see, newest job first, at most `limit` of them."""
    jobs = job_list(user=user)
    if job_id is not None:
        jobs = jobs.filter(pk=job_id)
    if project:
        jobs = jobs.filter(project__name=project)
    runs = []
    for run in _runs_of(list(jobs[:limit])):
        if status is None or run.status == status:
            runs.append(run)
        if len(runs) >= limit:
            break
    return runs


def run_rows(runs: list[Run]) -> list[RunListed]:
    """The runs as listed: each with every metric's final and best value (best by the metric's goal,
    guessed from its name; null without one), read for all of them at once."""
    finals = metric_finals(job_ids=sorted({run.job.pk for run in runs}))
    rows: list[RunListed] = []
    for run in runs:
        metrics = finals.get((run.job.pk, run.attempt), {})
        final_metrics: list[FinalMetric] = []
        for name in sorted(metrics):
            goal = goal_of(name, {})
            found = metrics[name]
            final_metrics.append({"name": name, "goal": goal, "last": found["last"], "last_step": found["last_step"],
                                  "best": _best(found, goal)})
        rows.append({**run.as_row(), "final_metrics": final_metrics})
    return rows


def run_get(*, user: Any, run_id: str) -> Run:
    """The run, if its job is one the user may see and it has that attempt; else 404."""
    match = RUN_ID.match(run_id)
    job = None
    if match:
        job = jobs_visible_to(user).filter(pk=int(match[1])).first()
    if job is None or int(match[2]) > job.attempt:  # type: ignore[index]
        raise NotFound(f"no such run: {run_id!r} (a run is <job id>.<attempt>).")
    attempt = int(match[2])  # type: ignore[index]
    return Run(job, attempt, list(JobNode.objects.filter(job=job, attempt=attempt).order_by("node_rank")))


def _metrics_of(run: Run) -> list[RunMetric]:
    summary = metric_summary(job_id=run.job.pk, attempt=run.attempt)
    return [{"name": name, **values} for name, values in summary.items()]


def run_detail(run: Run) -> RunDetail:
    job = run.job
    return {
        **run.as_row(),
        "spec": public_spec(job.spec or {}),
        "nodes": run.nodes,
        "metrics": _metrics_of(run),
        "checkpoints": list(CheckpointManifest.objects.filter(job=job, attempt=run.attempt, deleted=False).order_by("step")),
        "artifacts": list(Artifact.objects.filter(job=job, attempt=run.attempt)),
    }


def _best(found: MetricFinal | MetricSummary, goal: str | None) -> float | None:
    """The metric's best value by its goal ("min" or "max"); None without one."""
    return found["min"] if goal == "min" else found["max"] if goal == "max" else None


def goal_of(name: str, goals: dict[str, str]) -> str | None:
    if name in goals:
        return goals[name]
    if LOWER_IS_BETTER.search(name):
        return "min"
    if HIGHER_IS_BETTER.search(name):
        return "max"
    return None


def _flatten(values: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"optim": {"lr": 0.1}} -> {"optim.lr": 0.1}: nested hyperparameters line up by name."""
    flat: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, dict) and value:
            flat |= _flatten(value, f"{prefix}{key}.")
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def runs_compare(*, runs: list[Run], names: list[str] | None, goals: dict[str, str], points: int,
                 from_step: int | None = None, to_step: int | None = None) -> RunsCompared:
    """Several runs side by side: their hyperparameters (and world size and arguments), each
    metric's final and best value, and each metric's series downsampled onto one step grid shared
    by every run (so their buckets line up by `step`)."""
    if names is None:
        names = sorted({n for run in runs for n in metric_names(job_id=run.job.pk, attempt=run.attempt)})
    flat = [_flatten(run.hyperparameters) for run in runs]
    columns: list[tuple[str, list[Any]]] = [
        ("world_size", [run.world_size for run in runs]),
        ("args", [" ".join((run.job.spec or {}).get("args") or []) for run in runs]),
        *((key, [f.get(key) for f in flat]) for key in sorted({k for f in flat for k in f})),
    ]
    rows: list[HyperparameterRow] = [{"name": name, "values": values, "differs": len({repr(v) for v in values}) > 1}
                                     for name, values in columns]

    metrics: list[ComparedMetric] = []
    summaries = [metric_summary(job_id=run.job.pk, attempt=run.attempt, names=names) for run in runs]
    for name in names:
        goal = goal_of(name, goals)
        values: list[ComparedValue] = []
        for summary in summaries:
            found = summary.get(name)
            if found is None:
                values.append({"last": None, "last_step": None, "min": None, "max": None, "mean": None, "best": None,
                               "count": 0})
            else:
                values.append({**found, "best": _best(found, goal)})
        metrics.append({"name": name, "goal": goal, "values": values})

    events = [metric_events(job_id=run.job.pk, attempt=run.attempt) for run in runs]
    spans = [b for qs in events if (b := step_bounds(qs, names, from_step=from_step, to_step=to_step))]
    grid = None
    if spans:
        first = from_step if from_step is not None else min(b[0] for b in spans)
        last = to_step if to_step is not None else max(b[1] for b in spans)
        grid = grid_over(first, last, points) if last >= first else None
    series: list[ComparedSeries] = []
    for name in names:
        per_run: list[list[MetricBucket]] = []
        for run, qs in zip(runs, events, strict=True):
            per_run.append(bucketed(qs, name, grid).get(run.attempt, []) if grid else [])
        series.append({"name": name, "runs": per_run})
    return {
        "runs": [run.as_row() for run in runs],
        "hyperparameters": rows,
        "metrics": metrics,
        "from_step": grid.from_step if grid else None,
        "to_step": grid.to_step if grid else None,
        "bucket_steps": grid.bucket_steps if grid else None,
        "series": series,
    }

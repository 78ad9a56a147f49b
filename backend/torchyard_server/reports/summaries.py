"""Job summaries (the Rust coordinator): where a job stands, how fast it goes and when it should be done, with
its nodes and checkpoints; one job's (`/api/jobs/{id}/summary`) or every visible job's
(`/api/jobs/summaries`). The progress numbers are the ones ingest folds from metric events
(jobs.services.job_record_progress); a summary only reads them, with the checkpoints' count."""

from __future__ import annotations

import datetime as dt
from typing import Any, TypedDict

from django.db.models import Count, Max
from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..checkpoints.models import CheckpointManifest
from ..jobs.models import Job, JobNode
from ..jobs.selectors import job_list, job_visible_or_404
from ..jobs.spec.progress import JobProgress
from ..rest.params import int_param
from .serializers import JobReportOut


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class CheckpointCount(TypedDict):
    count: int  # committed and kept
    last_step: int | None


class JobReport(TypedDict):
    """A job's summary (JobReportOut): the nodes are the serializer's to write out."""

    id: int
    name: str
    project: str
    owner: str
    status: str
    status_reason: str
    attempt: int
    restarts: int
    world_size: int | None
    step: int | None
    total_steps: int | None
    percent: float | None
    steps_per_second: float | None
    samples_per_second: float | None
    throughput: float | None
    loss: float | None
    eta_seconds: float | None
    created_at: dt.datetime
    started_at: dt.datetime | None
    finished_at: dt.datetime | None
    duration_seconds: float | None
    checkpoints: int
    last_checkpoint_step: int | None
    progress: dict[str, Any]  # Job.progress as stored: what the ranks reported beyond the numbers above
    nodes: list[JobNode]


def job_summary(job: Job, checkpoints: CheckpointCount | None = None) -> JobReport:
    progress = JobProgress.from_json(job.progress)
    step, total = progress.step, progress.total_steps
    duration = None
    if job.started_at:
        duration = ((job.finished_at or timezone.now()) - job.started_at).total_seconds()
    return {
        "id": job.pk, "name": job.name, "project": job.project.name, "owner": job.owner.username,
        "status": job.status, "status_reason": job.status_reason, "attempt": job.attempt, "restarts": job.restarts,
        "world_size": job.world_size, "step": step, "total_steps": total,
        "percent": min(100.0, 100.0 * step / total) if isinstance(step, int) and isinstance(total, int) and total > 0 else None,
        "steps_per_second": _number(progress.steps_per_second),
        "samples_per_second": _number(progress.samples_per_second),
        "throughput": _number(progress.throughput),
        "loss": _number(progress.loss),
        "eta_seconds": _number(progress.eta_seconds),
        "created_at": job.created_at, "started_at": job.started_at, "finished_at": job.finished_at,
        "duration_seconds": duration,
        "checkpoints": checkpoints["count"] if checkpoints else 0,
        "last_checkpoint_step": checkpoints["last_step"] if checkpoints else None,
        "progress": job.progress or {},  # as stored: what the ranks reported beyond the numbers above
        "nodes": [n for n in job.nodes.all() if n.attempt == job.attempt],
    }


def job_summaries(jobs: list[Job]) -> list[JobReport]:
    """Summaries of several jobs, their checkpoints counted in one query."""
    counts: dict[int, CheckpointCount] = {
        row["job_id"]: {"count": row["count"], "last_step": row["last_step"]}
        for row in CheckpointManifest.objects.filter(job_id__in=[j.pk for j in jobs], deleted=False)
        .values("job_id").order_by("job_id").annotate(count=Count("id"), last_step=Max("step"))
    }
    return [job_summary(job, counts.get(job.pk)) for job in jobs]


class JobSummaryView(APIView):
    """Steps, throughput and ETA, and how each node is doing (the Rust coordinator's job summary)."""

    @extend_schema(responses=JobReportOut)
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        return Response(JobReportOut(job_summaries([job])[0]).data)


class JobSummariesView(APIView):
    """The summary of every job the user may see, newest first (the Rust coordinator's `GET /jobs/summaries`)."""

    @extend_schema(responses=JobReportOut(many=True), parameters=[
        OpenApiParameter("status", str, description="Only jobs in these states, comma-separated."),
        OpenApiParameter("project", str, description="Only this project's jobs."),
        OpenApiParameter("limit", int, description="At most this many (default 200, at most 1000)."),
    ])
    def get(self, request):
        limit = int_param(request, "limit", 200, maximum=1000)
        statuses = [s for s in request.query_params.get("status", "").split(",") if s]
        unknown = [s for s in statuses if s not in Job.Status.values]
        if unknown:
            raise ValidationError({"status": [f"not a job status: {s!r}." for s in unknown]})
        jobs = job_list(statuses=statuses, project=request.query_params.get("project"),
                        user=request.user).prefetch_related("nodes")
        return Response(JobReportOut(job_summaries(list(jobs[:limit])), many=True).data)

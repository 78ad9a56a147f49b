"""A job's stored events over HTTP: all of them, or only its logs, after a cursor; its metrics as
downsampled series."""

from __future__ import annotations

import re

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.exceptions import ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..jobs.selectors import job_visible_or_404
from ..rest.params import int_param
from .metrics import MAX_POINTS, metric_series
from .selectors import job_events, job_events_tail
from .serializers import EventPageOut, JobMetricsOut

CURSOR_PARAMETERS = [
    OpenApiParameter("after", int, description="Only events with a greater id (the resume cursor)."),
    OpenApiParameter("before", int, description="Only events with a smaller id: with `tail`, the page of older lines above one already shown."),
    OpenApiParameter("limit", int, description="At most this many events (default 1000, at most 10000)."),
    OpenApiParameter("rank", int, description="Only this global rank's events."),
    OpenApiParameter("tail", int, description="Only the last N (after the cursor), oldest first; at most 10000."),
]
METRIC_NAME = re.compile(r"^[^,\s][^,]{0,199}$")


def _events_response(request, job_id: int, types: list[str] | None):
    job_visible_or_404(user=request.user, job_id=job_id)
    after = int_param(request, "after", 0)
    limit = int_param(request, "limit", 1000, maximum=10_000)
    rank = int_param(request, "rank", None)
    before = int_param(request, "before", None)
    tail = int_param(request, "tail", None, maximum=10_000)
    requested = request.query_params.get("type")
    if requested:
        types = [t for t in requested.split(",") if t]
    if tail is not None:
        rows = job_events_tail(job_id=job_id, count=tail, after=after, before=before, types=types, rank=rank)
    else:
        rows = job_events(job_id=job_id, after=after, before=before, types=types, rank=rank, limit=limit)
    events = [e.as_message() for e in rows]
    return Response({"events": events, "next_after": events[-1]["id"] if events else after})


class JobLogsView(APIView):
    @extend_schema(responses=EventPageOut, parameters=CURSOR_PARAMETERS)
    def get(self, request, job_id: int):
        return _events_response(request, job_id, ["log"])


class JobMetricsView(APIView):
    """The job's metric series over every attempt, downsampled in the database onto one step grid:
    each bucket keeps the min and max of the values reported in it (so a spike is never averaged
    away), their mean and count. The raw events are `/events?type=metric`."""

    @extend_schema(responses=JobMetricsOut, parameters=[
        OpenApiParameter("name", str, description="Metric names, comma-separated (default: every one reported)."),
        OpenApiParameter("from_step", int, description="First step (default: the first reported)."),
        OpenApiParameter("to_step", int, description="Last step (default: the last reported)."),
        OpenApiParameter("points", int, description=f"At most this many buckets per series (default 500, at most {MAX_POINTS})."),
        OpenApiParameter("attempt", int, description="Only this attempt."),
        OpenApiParameter("rank", int, description="Only this global rank's values."),
    ])
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        names = None
        if request.query_params.get("name"):
            names = [n.strip() for n in request.query_params["name"].split(",") if n.strip()]
            bad = [n for n in names if not METRIC_NAME.match(n)]
            if bad:
                raise ValidationError({"name": [f"not a metric name: {n!r}." for n in bad]})
        from_step, to_step = int_param(request, "from_step", None), int_param(request, "to_step", None)
        if from_step is not None and to_step is not None and to_step < from_step:
            raise ValidationError({"to_step": ["must be >= from_step."]})
        points = int_param(request, "points", 500, maximum=MAX_POINTS)
        if points < 1:
            raise ValidationError({"points": ["must be >= 1."]})
        data = metric_series(job_id=job.pk, names=names, attempt=int_param(request, "attempt", None),
                             rank=int_param(request, "rank", None), from_step=from_step, to_step=to_step,
                             points=points)
        return Response(JobMetricsOut(data).data)


class JobEventsView(APIView):
    @extend_schema(responses=EventPageOut, parameters=[
        *CURSOR_PARAMETERS,
        OpenApiParameter("type", str, description="Only these types, comma-separated (log, metric, state ...)."),
    ])
    def get(self, request, job_id: int):
        return _events_response(request, job_id, None)

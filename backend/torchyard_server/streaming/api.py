"""A job's stored events over HTTP: all of them, or only its logs or metrics, after a cursor."""

from __future__ import annotations

from rest_framework.response import Response
from rest_framework.views import APIView

from ..jobs.selectors import job_visible_or_404
from ..params import int_param
from .selectors import job_events


def _events_response(request, job_id: int, types: list[str] | None):
    job_visible_or_404(user=request.user, job_id=job_id)
    after = int_param(request, "after", 0)
    limit = int_param(request, "limit", 1000, maximum=10_000)
    rank = int_param(request, "rank", None)
    requested = request.query_params.get("type")
    if requested:
        types = [t for t in requested.split(",") if t]
    events = [e.as_message() for e in job_events(job_id=job_id, after=after, types=types, rank=rank, limit=limit)]
    return Response({"events": events, "next_after": events[-1]["id"] if events else after})


class JobLogsView(APIView):
    def get(self, request, job_id: int):
        return _events_response(request, job_id, ["log"])


class JobMetricsView(APIView):
    def get(self, request, job_id: int):
        return _events_response(request, job_id, ["metric"])


class JobEventsView(APIView):
    def get(self, request, job_id: int):
        return _events_response(request, job_id, None)

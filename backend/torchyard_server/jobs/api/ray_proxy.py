"""GET /api/jobs/{id}/ray/{path}: the Ray dashboard of a running Ray job (framework ray), through
Torchyard's sign-in and the job's permissions. The head node's supervisor reports the dashboard's
port in its `running` event (node progress "ray"); the dashboard itself listens on the head's own
address only, and is read here with a timeout, its body streamed."""

from __future__ import annotations

from typing import Any

import requests
from django.http import StreamingHttpResponse
from drf_spectacular.utils import extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.views import APIView

from ..models import Job, JobNode
from ..selectors import job_visible_or_404
from ..spec.jobspec import JobSpec

TIMEOUT_S = (3.0, 30.0)  # connect, read
CHUNK = 64 * 1024
# What the answer passes on of the dashboard's headers (no cookies, no hop-by-hop headers).
PASSED_HEADERS = ("Content-Type", "Cache-Control", "Last-Modified", "ETag")


def dashboard_base(job: Job) -> str:
    """http://HEAD:PORT of the job's Ray dashboard; NotFound when the job is no live Ray job."""
    if JobSpec.from_json(job.spec).framework != "ray":
        raise NotFound("this job is not a Ray job (framework ray): it has no Ray dashboard.")
    if job.status not in (Job.Status.DISPATCHING, Job.Status.RUNNING):
        raise NotFound(f"the job is {job.status}: its Ray dashboard runs only while it does.")
    head = JobNode.objects.filter(job=job, attempt=job.attempt, node_rank=0, status=JobNode.Status.RUNNING).first()
    port = ((head.progress or {}).get("ray") or {}).get("dashboard_port") if head else None
    if head is None or not isinstance(port, int):
        raise NotFound("the Ray head of this job has not started its dashboard yet.")
    host = f"[{head.host}]" if ":" in head.host else head.host
    return f"http://{host}:{port}"


class JobRayDashboardView(APIView):
    @extend_schema(exclude=True)
    def get(self, request, job_id: int, path: str = "") -> Any:
        job = job_visible_or_404(user=request.user, job_id=job_id)
        url = f"{dashboard_base(job)}/{path.lstrip('/')}"
        try:
            upstream = requests.get(url, params=request.GET.lists(), stream=True, timeout=TIMEOUT_S,
                                    allow_redirects=False)
        except requests.RequestException as exc:
            raise NotFound(f"the Ray dashboard does not answer: {exc.__class__.__name__}") from exc

        def body():
            try:
                yield from upstream.iter_content(CHUNK)
            finally:
                upstream.close()

        response = StreamingHttpResponse(body(), status=upstream.status_code)
        for name in PASSED_HEADERS:
            if name in upstream.headers:
                response[name] = upstream.headers[name]
        return response

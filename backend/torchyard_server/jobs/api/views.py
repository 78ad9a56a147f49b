from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from ...projects.permissions import require_job_control
from ...rest.openapi import ErrorOut
from ...rest.params import int_param
from ..control.admission import admit_spec
from ..control.dispatch import job_preview_plan
from ..control.queue_pass import job_set_priority
from ..control.stacks import NothingRunning, job_request_stacks
from ..control.stop import job_delete, job_stop
from ..control.submit import job_submit
from ..intake.serializer import JobSpecSerializer
from ..selectors import job_get, job_list, job_visible_or_404
from ..spec.jobspec import JobSpec
from ..spec.recipes import recipe_catalog
from ..states import JOB_LIVE
from .queue import JobPatchIn
from .serializers import JobDetailOut, JobSummaryOut, PlanOut, RecipeOut, StacksRequestedOut


def _admitted_spec(request) -> JobSpec:
    """The request's JobSpec: its shape checked, then admitted for its user (control/admission.py)."""
    data = JobSpecSerializer(data=request.data)
    data.is_valid(raise_exception=True)
    return JobSpec.from_json(admit_spec(data.validated_data, user=request.user))


class RecipeListView(APIView):
    """The built-in recipes a JobSpec's entrypoint may name, each with a one-paragraph summary."""

    @extend_schema(responses=RecipeOut(many=True))
    def get(self, request):
        return Response(recipe_catalog())


class JobListView(APIView):
    @extend_schema(responses=JobSummaryOut(many=True), parameters=[
        OpenApiParameter("status", str, description="only jobs in this state"),
        OpenApiParameter("project", str, description="only this project's jobs"),
        OpenApiParameter("limit", int, description="at most this many, newest first (default 200, at most 1000)"),
    ])
    def get(self, request):
        limit = int_param(request, "limit", 200, maximum=1000)
        status_ = request.query_params.get("status")
        jobs = job_list(statuses=[status_] if status_ else None, project=request.query_params.get("project"),
                        user=request.user)
        return Response(JobSummaryOut(jobs[:limit], many=True).data)

    @extend_schema(request=JobSpecSerializer, responses={201: JobDetailOut})
    def post(self, request):
        job = job_submit(spec=_admitted_spec(request), owner=request.user)
        return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_201_CREATED)


class JobPlanView(APIView):
    """Dry run: the execution plan the spec would get now. Nothing is launched."""

    @extend_schema(request=JobSpecSerializer, responses=PlanOut)
    def post(self, request):
        return Response(job_preview_plan(spec=_admitted_spec(request)).to_json())


class JobDetailView(APIView):
    @extend_schema(responses=JobDetailOut)
    def get(self, request, job_id: int):
        return Response(JobDetailOut(job_visible_or_404(user=request.user, job_id=job_id)).data)

    @extend_schema(request=JobPatchIn, responses=JobDetailOut)
    def patch(self, request, job_id: int):
        """Change a live job's priority: a queued job moves in the queue at once. Its owner (a member)
        or an admin of its project, up to the project's priority ceiling (staff: any). Audited."""
        job = job_visible_or_404(user=request.user, job_id=job_id)
        require_job_control(request.user, job)
        data = JobPatchIn(data=request.data)
        data.is_valid(raise_exception=True)
        job_set_priority(job=job, priority=data.validated_data["priority"], user=request.user)
        return Response(JobDetailOut(job_get(job_id=job.pk)).data)

    @extend_schema(responses={202: JobDetailOut, 204: None})
    def delete(self, request, job_id: int):
        """Cancel a live job (as stop); delete a finished one with its events and records."""
        job = job_visible_or_404(user=request.user, job_id=job_id)
        require_job_control(request.user, job)
        if job.status in JOB_LIVE:
            job_stop(job_id=job.pk, reason=f"cancelled by {request.user.username}")
            return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_202_ACCEPTED)
        job_delete(job=job)
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobStacksView(APIView):
    @extend_schema(request=None, responses={202: StacksRequestedOut, 409: ErrorOut})
    def post(self, request, job_id: int):
        """Ask each running node for its ranks' Python stacks (py-spy, read without pausing them): one
        `stacks` event per node follows on the job's stream and events. 409 when no node runs."""
        job = job_visible_or_404(user=request.user, job_id=job_id)
        try:
            asked = job_request_stacks(job=job)
        except NothingRunning as exc:
            return Response({"detail": str(exc)}, status=status.HTTP_409_CONFLICT)
        return Response(asked, status=status.HTTP_202_ACCEPTED)


class JobStopView(APIView):
    @extend_schema(request=None, responses={202: JobDetailOut})
    def post(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        require_job_control(request.user, job)
        job_stop(job_id=job.pk, reason=f"stopped by {request.user.username}")
        return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_202_ACCEPTED)



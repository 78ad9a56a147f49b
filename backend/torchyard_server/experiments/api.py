from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.response import Response
from rest_framework.views import APIView

from ..rest.openapi import ErrorOut
from ..rest.params import int_param
from .runs import run_detail, run_get, run_list, run_rows, runs_compare
from .serializers import CompareIn, CompareOut, RunDetailOut, RunRowOut


class RunListView(APIView):
    """Runs (attempts of jobs) of the projects the user may see, newest first (DistroML's experiments),
    each with the final and best value of every metric it reported."""

    @extend_schema(responses=RunRowOut(many=True), parameters=[
        OpenApiParameter("job", int, description="Only this job's runs."),
        OpenApiParameter("project", str, description="Only this project's runs."),
        OpenApiParameter("status", str, description="Only runs that ended so (or, current, are in it)."),
        OpenApiParameter("limit", int, description="At most this many (default 200, at most 1000)."),
    ])
    def get(self, request):
        runs = run_list(user=request.user, job_id=int_param(request, "job", None),
                        project=request.query_params.get("project") or None,
                        status=request.query_params.get("status") or None,
                        limit=int_param(request, "limit", 200, maximum=1000))
        return Response(RunRowOut(run_rows(runs), many=True).data)


class RunDetailView(APIView):
    """One run: its job's spec, its nodes, a summary of every metric it reported, its checkpoints and artifacts."""

    @extend_schema(responses=RunDetailOut)
    def get(self, request, run_id: str):
        return Response(RunDetailOut(run_detail(run_get(user=request.user, run_id=run_id))).data)


class RunCompareView(APIView):
    """Runs side by side: hyperparameters, final and best metrics, and every metric's series
    downsampled onto one step grid (min and max kept per bucket)."""

    @extend_schema(request=CompareIn, responses={200: CompareOut, 404: OpenApiResponse(
        ErrorOut, description="A run that does not exist, or that this user may not see.")})
    def post(self, request):
        data = CompareIn(data=request.data)
        data.is_valid(raise_exception=True)
        options = data.validated_data
        runs = [run_get(user=request.user, run_id=run_id) for run_id in options["runs"]]
        return Response(CompareOut(runs_compare(
            runs=runs, names=options.get("metrics"), goals=options.get("goals") or {}, points=options["points"],
            from_step=options.get("from_step"), to_step=options.get("to_step"))).data)

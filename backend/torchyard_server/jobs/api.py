from __future__ import annotations

import json
import posixpath
from typing import overload

from django.http import FileResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from ..checkpoints.models import CheckpointManifest
from ..checkpoints.selectors import checkpoint_list
from ..checkpoints.serializers import CheckpointOut
from ..checkpoints.storage import OutsideJobStore, storage_for
from ..renderers import DOWNLOAD_RENDERERS
from ..streaming.selectors import job_events
from .models import Job
from .selectors import job_get, job_list
from .serializers import JobDetailOut, JobSummaryOut
from .services import job_preview_plan, job_stop, job_submit
from .spec import JobSpecSerializer, recipe_catalog
from .states import JOB_LIVE


def _validated_spec(request) -> dict:
    data = JobSpecSerializer(data=request.data, context={"request": request})
    data.is_valid(raise_exception=True)
    return data.validated_data


@overload
def _int_param(request, name: str, default: int, *, maximum: int | None = None) -> int: ...
@overload
def _int_param(request, name: str, default: None, *, maximum: int | None = None) -> int | None: ...
def _int_param(request, name: str, default: int | None, *, maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: ["must be an integer."]}) from None
    if value < 0:
        raise ValidationError({name: ["must be >= 0."]})
    return min(value, maximum) if maximum else value


class RecipeListView(APIView):
    """The built-in recipes a JobSpec's entrypoint may name, each with a one-paragraph summary."""

    def get(self, request):
        return Response(recipe_catalog())


class JobListView(APIView):
    @extend_schema(responses=JobSummaryOut(many=True), parameters=[OpenApiParameter("status", str)])
    def get(self, request):
        limit = _int_param(request, "limit", 200, maximum=1000)
        jobs = job_list(status=request.query_params.get("status"))[:limit]
        return Response(JobSummaryOut(jobs, many=True).data)

    @extend_schema(request=JobSpecSerializer, responses={201: JobDetailOut})
    def post(self, request):
        job = job_submit(spec=_validated_spec(request), owner=request.user)
        return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_201_CREATED)


class JobPlanView(APIView):
    """Dry run: the execution plan the spec would get now. Nothing is launched."""

    @extend_schema(request=JobSpecSerializer, responses={200: dict})
    def post(self, request):
        return Response(job_preview_plan(spec=_validated_spec(request)))


class JobDetailView(APIView):
    @extend_schema(responses=JobDetailOut)
    def get(self, request, job_id: int):
        job = job_get(job_id=job_id)
        if job is None:
            return Response({"detail": "no such job."}, status=status.HTTP_404_NOT_FOUND)
        return Response(JobDetailOut(job).data)

    def delete(self, request, job_id: int):
        """Cancel a live job (as stop); delete a finished one with its events and records."""
        job = get_object_or_404(Job, pk=job_id)
        if job.status in JOB_LIVE:
            job_stop(job_id=job.pk, reason=f"cancelled by {request.user.username}")
            return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_202_ACCEPTED)
        job.delete()
        return Response(status=status.HTTP_204_NO_CONTENT)


class JobStopView(APIView):
    @extend_schema(request=None, responses={202: JobDetailOut})
    def post(self, request, job_id: int):
        job = get_object_or_404(Job, pk=job_id)
        job_stop(job_id=job.pk, reason=f"stopped by {request.user.username}")
        return Response(JobDetailOut(job_get(job_id=job.pk)).data, status=status.HTTP_202_ACCEPTED)


class JobSummaryView(APIView):
    """Steps, throughput and ETA, and how each node is doing (seed 001's job summary)."""

    def get(self, request, job_id: int):
        job = job_get(job_id=job_id)
        if job is None:
            return Response({"detail": "no such job."}, status=status.HTTP_404_NOT_FOUND)
        data = JobDetailOut(job).data
        duration = None
        if job.started_at:
            end = job.finished_at or None
            from django.utils import timezone

            duration = ((end or timezone.now()) - job.started_at).total_seconds()
        return Response({
            "id": job.pk, "name": job.name, "status": job.status, "status_reason": job.status_reason,
            "attempt": job.attempt, "world_size": job.world_size, "progress": job.progress,
            "duration_seconds": duration, "nodes": data["nodes"],
            "checkpoints": checkpoint_list(job_id=job.pk).count(),
        })


def _events_response(request, job_id: int, types: list[str] | None):
    get_object_or_404(Job, pk=job_id)
    after = _int_param(request, "after", 0)
    limit = _int_param(request, "limit", 1000, maximum=10_000)
    rank = _int_param(request, "rank", None)
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


class JobCheckpointManifestView(APIView):
    """The committed manifest.json itself, read from the store."""

    def get(self, request, job_id: int, checkpoint_id: int):
        row = get_object_or_404(CheckpointManifest, pk=checkpoint_id, job_id=job_id)
        storage, key = _checkpoint_storage(row.uri, job_id)
        try:
            with storage.open(key, "rb") as handle:
                return Response(json.loads(handle.read()))
        except (OSError, ValueError) as exc:
            return Response({"detail": f"manifest unavailable: {exc}"}, status=status.HTTP_404_NOT_FOUND)


class JobCheckpointFileView(APIView):
    """One file of a committed checkpoint, streamed from the store (local or S3)."""

    renderer_classes = DOWNLOAD_RENDERERS

    def get(self, request, job_id: int, checkpoint_id: int, path: str):
        row = get_object_or_404(CheckpointManifest, pk=checkpoint_id, job_id=job_id)
        entry = next((f for f in row.files if f.get("path") == path), None)
        if entry is None:
            return Response({"detail": f"{path!r} is not a file of this checkpoint."}, status=status.HTTP_404_NOT_FOUND)
        storage, manifest_key = _checkpoint_storage(row.uri, job_id)
        key = posixpath.join(posixpath.dirname(manifest_key), path)
        try:
            handle = storage.open(key, "rb")
        except (OSError, ValueError) as exc:
            return Response({"detail": f"file unavailable: {exc}"}, status=status.HTTP_404_NOT_FOUND)
        response = FileResponse(handle, as_attachment=True, filename=posixpath.basename(path),
                                content_type="application/octet-stream")
        response["X-Checkpoint-Sha256"] = entry.get("sha256", "")
        return response


def _checkpoint_storage(uri: str, job_id: int):
    try:
        return storage_for(uri, job_id)
    except OutsideJobStore as exc:
        raise NotFound(str(exc)) from None


class JobCheckpointsView(APIView):
    def get(self, request, job_id: int):
        get_object_or_404(Job, pk=job_id)
        return Response(CheckpointOut(checkpoint_list(job_id=job_id), many=True).data)

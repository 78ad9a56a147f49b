"""A job's artifacts: listed, downloaded one by one (streamed from the store), or all as one zip."""

from __future__ import annotations

import tempfile
import zipfile

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from ..checkpoints.storage import OutsideJobStore, storage_for
from ..jobs.selectors import job_visible_or_404
from ..rest.renderers import DOWNLOAD_RENDERERS, StreamedFileResponse
from .models import Artifact, FunctionResult
from .serializers import ArtifactOut, FunctionResultsOut

CHUNK = 1 << 20


def artifact_response(artifact: Artifact) -> StreamedFileResponse:
    try:
        storage, key = storage_for(artifact.uri, artifact.job_id)
        handle = storage.open(key, "rb")
    except (OutsideJobStore, OSError, ValueError) as exc:
        raise NotFound(f"artifact unavailable: {exc}") from None
    response = StreamedFileResponse(handle, as_attachment=True, filename=artifact.path.rsplit("/", 1)[-1],
                            content_type="application/octet-stream")
    response["X-Artifact-Sha256"] = artifact.sha256
    return response


class JobArtifactsView(APIView):
    @extend_schema(responses=ArtifactOut(many=True))
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        return Response(ArtifactOut(job.artifacts.all(), many=True).data)


class JobArtifactFileView(APIView):
    renderer_classes = DOWNLOAD_RENDERERS
    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, job_id: int, artifact_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        return artifact_response(get_object_or_404(Artifact, pk=artifact_id, job_id=job.pk))


class JobArtifactArchiveView(APIView):
    """Every artifact of the job in one zip: attempt-<a>/node-<r>/<path>."""

    renderer_classes = DOWNLOAD_RENDERERS

    @extend_schema(responses={(200, "application/zip"): OpenApiTypes.BINARY})
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        spool = tempfile.SpooledTemporaryFile(max_size=32 << 20)  # noqa: SIM115 - FileResponse closes it
        with zipfile.ZipFile(spool, "w", compression=zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
            for artifact in job.artifacts.all():
                try:
                    storage, key = storage_for(artifact.uri, job.pk)
                    source = storage.open(key, "rb")
                except (OutsideJobStore, OSError, ValueError):
                    continue
                name = f"attempt-{artifact.attempt}/node-{artifact.node_rank}/{artifact.path}"
                with source, archive.open(name, "w", force_zip64=True) as target:
                    while chunk := source.read(CHUNK):
                        target.write(chunk)
        spool.seek(0)
        return StreamedFileResponse(spool, as_attachment=True, filename=f"job-{job.pk}-artifacts.zip",
                            content_type="application/zip")


class JobResultsView(APIView):
    """A function job's results (torchyard.fn): one per rank of its last attempt, with the return
    value's repr, or the exception's type, message and remote traceback."""

    @extend_schema(responses=FunctionResultsOut)
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        function = job.spec.get("function")
        if not function:
            raise NotFound("this job runs a script, not a function: it has no results (see its artifacts).")
        results = FunctionResult.objects.filter(job=job, attempt=job.attempt)
        return Response(FunctionResultsOut({
            "function": function.get("name") or "", "status": job.status, "attempt": job.attempt,
            # A Ray job's function runs once, as the driver on the head: one result (rank 0).
            "world_size": 1 if job.spec.get("framework") == "ray" else job.world_size, "results": results}).data)


class JobResultFileView(APIView):
    """One rank's pickled result (cloudpickle), as the caller unpickles it."""

    renderer_classes = DOWNLOAD_RENDERERS

    @extend_schema(operation_id="jobs_results_download", responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, job_id: int, rank: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        result = get_object_or_404(FunctionResult, job=job, attempt=job.attempt, rank=rank)
        if not result.uri:
            raise NotFound(f"rank {rank} left no value to download: {result.error_type}: {result.error}")
        try:
            storage, key = storage_for(result.uri, job.pk)
            handle = storage.open(key, "rb")
        except (OutsideJobStore, OSError, ValueError) as exc:
            raise NotFound(f"result unavailable: {exc}") from None
        response = StreamedFileResponse(handle, as_attachment=True, filename=f"job-{job.pk}-rank-{rank}.pkl",
                                content_type="application/octet-stream")
        response["X-Result-Sha256"] = result.sha256
        return response

"""A job's committed checkpoints (listed, their manifests and files read back from the store). The
job summary, which counts them, is a report (reports/summaries.py)."""

from __future__ import annotations

import json
import posixpath

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView

from ..jobs.selectors import job_visible_or_404
from ..rest.renderers import DOWNLOAD_RENDERERS, StreamedFileResponse
from .models import CheckpointManifest
from .selectors import checkpoint_list
from .serializers import CheckpointOut
from .storage import OutsideJobStore, storage_for


class JobCheckpointManifestView(APIView):
    """The committed manifest.json itself, read from the store."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT})
    def get(self, request, job_id: int, checkpoint_id: int):
        row = _checkpoint_or_404(request, job_id, checkpoint_id)
        if row.tier == CheckpointManifest.Tier.MEMORY:
            return Response(row.manifest)  # it has no file: the commit's event carried it whole
        storage, key = _checkpoint_storage(row.uri, job_id)
        try:
            with storage.open(key, "rb") as handle:
                return Response(json.loads(handle.read()))
        except (OSError, ValueError) as exc:
            return Response({"detail": f"manifest unavailable: {exc}"}, status=status.HTTP_404_NOT_FOUND)


class JobCheckpointFileView(APIView):
    """One file of a committed checkpoint, streamed from the store (local or S3)."""

    renderer_classes = DOWNLOAD_RENDERERS

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, job_id: int, checkpoint_id: int, path: str):
        row = _checkpoint_or_404(request, job_id, checkpoint_id)
        entry = next((f for f in row.files if f.get("path") == path), None)
        if entry is None:
            return Response({"detail": f"{path!r} is not a file of this checkpoint."}, status=status.HTTP_404_NOT_FOUND)
        if row.tier == CheckpointManifest.Tier.MEMORY:
            holders = ", ".join(entry.get("holders") or []) or "no machine any more"
            return Response({"detail": f"a memory checkpoint: {path} is held in the memory of {holders}, for the "
                                       "job's recoveries; the store's checkpoints are the ones to download."},
                            status=status.HTTP_404_NOT_FOUND)
        storage, manifest_key = _checkpoint_storage(row.uri, job_id)
        key = posixpath.join(posixpath.dirname(manifest_key), path)
        try:
            handle = storage.open(key, "rb")
        except (OSError, ValueError) as exc:
            return Response({"detail": f"file unavailable: {exc}"}, status=status.HTTP_404_NOT_FOUND)
        response = StreamedFileResponse(handle, as_attachment=True, filename=posixpath.basename(path),
                                content_type="application/octet-stream")
        response["X-Checkpoint-Sha256"] = entry.get("sha256", "")
        return response


def _checkpoint_or_404(request, job_id: int, checkpoint_id: int) -> CheckpointManifest:
    job = job_visible_or_404(user=request.user, job_id=job_id)
    return get_object_or_404(CheckpointManifest, pk=checkpoint_id, job_id=job.pk)


def _checkpoint_storage(uri: str, job_id: int):
    try:
        return storage_for(uri, job_id)
    except OutsideJobStore as exc:
        raise NotFound(str(exc)) from None


class JobCheckpointsView(APIView):
    @extend_schema(responses=CheckpointOut(many=True))
    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        return Response(CheckpointOut(checkpoint_list(job_id=job.pk), many=True).data)

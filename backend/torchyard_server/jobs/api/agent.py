"""Routes an agent (or its node supervisors) calls with its machine token, not a user's."""

from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from ...bundles.models import Bundle
from ...bundles.services import bundle_storage
from ...machines.models import Machine
from ...machines.services import machine_authenticate
from ...rest.openapi import ErrorOut
from ...rest.renderers import DOWNLOAD_RENDERERS, StreamedFileResponse
from ..control.grants import bundle_granted
from ..models import JobNode


def machine_from_request(request) -> Machine | None:
    kind, _, token = request.headers.get("Authorization", "").partition(" ")
    return machine_authenticate(token=token) if kind == "Machine" else None


class AgentBundleView(APIView):
    """A code bundle's archive, for a machine that has been given a node of a job that runs it, or a
    signed grant to warm its cache: a machine token reads no other code."""

    renderer_classes = DOWNLOAD_RENDERERS

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY, 401: ErrorOut})
    def get(self, request, sha256: str):
        machine = machine_from_request(request)
        if machine is None:
            return Response({"detail": "invalid machine token."}, status=status.HTTP_401_UNAUTHORIZED)
        bundle = Bundle.objects.filter(sha256=sha256).first()
        # A job's code, or the pickled function of a function job.
        allowed = bundle_granted(request.headers.get("X-Torchyard-Grant", ""), sha256=sha256, machine_id=machine.pk) or JobNode.objects.filter(
            Q(job__spec__code__bundle=sha256) | Q(job__spec__function__payload=sha256), machine=machine).exists()
        if bundle is None or not allowed:
            return Response({"detail": "no such bundle for this machine."}, status=status.HTTP_404_NOT_FOUND)
        handle = bundle_storage().open(bundle.storage_name, "rb")
        response = StreamedFileResponse(handle, content_type="application/octet-stream")
        response["X-Bundle-Sha256"] = bundle.sha256
        return response

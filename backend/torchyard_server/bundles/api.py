from __future__ import annotations

import re

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView
from torchyard.bundles import BundleError, size_text

from ..rest.openapi import ValidationErrorOut
from .models import Bundle
from .serializers import BundleDetailOut, BundleLimitsOut, BundleOut
from .services import KINDS, bundle_for_user, bundle_store

SHA256 = re.compile(r"^[0-9a-f]{64}$")


class BundleLimitsView(APIView):
    @extend_schema(responses=BundleLimitsOut)
    def get(self, request):
        return Response({"max_bytes": settings.BUNDLE_MAX_BYTES})


class BundleListView(APIView):
    """The bundles this user uploaded, newest first."""

    @extend_schema(responses=BundleOut(many=True))
    def get(self, request):
        return Response(BundleOut(Bundle.objects.filter(owners=request.user)[:200], many=True).data)


class BundleDetailView(APIView):
    """`HEAD`/`GET`: is it there for this user (the CLI asks before it uploads); `PUT`: upload the
    archive as the raw request body. The sha256 in the URL must be the body's."""

    def _sha(self, sha256: str) -> str:
        if not SHA256.match(sha256):
            raise ValidationError({"sha256": ["must be 64 lowercase hex digits."]})
        return sha256

    @extend_schema(responses={200: BundleDetailOut, 400: ValidationErrorOut})
    def get(self, request, sha256: str):
        bundle = bundle_for_user(sha256=self._sha(sha256), user=request.user)
        if bundle is None:
            raise NotFound("no such bundle for this user.")
        return Response(BundleDetailOut(bundle).data)

    @extend_schema(
        request={"application/octet-stream": OpenApiTypes.BINARY}, responses={201: BundleDetailOut, 200: BundleDetailOut},
        parameters=[OpenApiParameter("kind", str, enum=list(KINDS), description=(
            "code (default): a project; function: a function's payload (function.pkl and function.json only), "
            "judged by its unpacked size against the limit, not by its compression ratio"))])
    def put(self, request, sha256: str):
        sha256 = self._sha(sha256)
        kind = request.query_params.get("kind") or "code"
        if kind not in KINDS:
            raise ValidationError({"kind": [f"{kind!r}: one of {', '.join(KINDS)}."]})
        length = int(request.META.get("CONTENT_LENGTH") or 0)
        if length > settings.BUNDLE_MAX_BYTES:
            raise ValidationError({"bundle": [
                f"the archive is {size_text(length)}, over the limit of {size_text(settings.BUNDLE_MAX_BYTES)}."]})
        if not length:
            raise ValidationError({"bundle": ["the request body (the archive) is empty."]})
        try:
            bundle, created = bundle_store(sha256=sha256, stream=request.stream, owner=request.user, kind=kind)
        except BundleError as exc:
            raise ValidationError({"bundle": [str(exc)]}) from None
        return Response(BundleDetailOut(bundle).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)

"""API errors: always JSON, always a 4xx with what was wrong, never a 500 for bad input."""

from __future__ import annotations

from django.http import JsonResponse
from django.views import defaults
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..jobs.errors import SpecRefused
from ..jobs.placement.candidates import PlanError
from ..machines.services import MachineInUse


def exception_handler(exc, context):
    """The services' domain errors, each as its HTTP answer; DRF's own as DRF answers them."""
    if isinstance(exc, SpecRefused):
        return Response(exc.errors, status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, PlanError):
        return Response({"resources": [exc.reason], "detail": exc.reason, "skipped": exc.skipped},
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, MachineInUse):
        return Response({"detail": str(exc), "live_nodes": exc.live_nodes}, status=status.HTTP_409_CONFLICT)
    return drf_exception_handler(exc, context)


def not_found(request, exception=None):
    """A path under /api/ that no route matches (a job id that is not a number, a typo) answers as
    the API's other 404s do: JSON with a detail. Django's page elsewhere."""
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": f"no route {request.path}."}, status=status.HTTP_404_NOT_FOUND)
    return defaults.page_not_found(request, exception)


def csrf_failure(request, reason: str = ""):
    """Django's CSRF refusal (the login form's), as a JSON 403 like every other refusal of the API."""
    return JsonResponse({"detail": f"CSRF check failed: {reason}"}, status=status.HTTP_403_FORBIDDEN)

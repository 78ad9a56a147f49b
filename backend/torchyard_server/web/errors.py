"""API errors: always JSON, always a 4xx with what was wrong, never a 500 for bad input."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..jobs.planner import PlanError
from ..machines.services import MachineInUse


def exception_handler(exc, context):
    if isinstance(exc, PlanError):
        return Response({"resources": [exc.reason], "detail": exc.reason, "skipped": exc.skipped},
                        status=status.HTTP_400_BAD_REQUEST)
    if isinstance(exc, MachineInUse):
        return Response({"detail": str(exc), "live_nodes": exc.live_nodes}, status=status.HTTP_409_CONFLICT)
    return drf_exception_handler(exc, context)

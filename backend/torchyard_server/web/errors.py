"""API errors: always JSON, always a 4xx with what was wrong, never a 500 for bad input."""

from __future__ import annotations

from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from ..jobs.planner import PlanError


def exception_handler(exc, context):
    if isinstance(exc, PlanError):
        return Response({"resources": [exc.reason], "detail": exc.reason}, status=status.HTTP_400_BAD_REQUEST)
    return drf_exception_handler(exc, context)

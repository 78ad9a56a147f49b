"""Sweeps: a search over hyperparameters whose trials are jobs (sweeps/services.py)."""

from __future__ import annotations

from types import SimpleNamespace

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import PermissionDenied
from rest_framework.response import Response
from rest_framework.views import APIView

from ..projects.permissions import can_control_job
from .selectors import sweep_list, sweep_state, sweep_visible_or_404
from .serializers import SweepOut, SweepSummaryOut
from .services import sweep_create, sweep_resume, sweep_stop
from .spec import SweepSpecSerializer


def _out(sweep, *, trials: bool = True) -> SimpleNamespace:
    return SimpleNamespace(**{f: getattr(sweep, f) for f in ("id", "name", "project", "owner", "status", "reason",
                                                              "spec", "created_at", "finished_at")},
                           **sweep_state(sweep, trials=trials))


class SweepListView(APIView):
    @extend_schema(responses=SweepSummaryOut(many=True))
    def get(self, request):
        return Response(SweepSummaryOut([_out(s, trials=False) for s in sweep_list(user=request.user)[:200]],
                                        many=True).data)

    @extend_schema(request=SweepSpecSerializer, responses={201: SweepOut})
    def post(self, request):
        checked = SweepSpecSerializer(data=request.data)
        checked.is_valid(raise_exception=True)
        sweep = sweep_create(spec=checked.validated_data, owner=request.user)
        sweep.refresh_from_db()
        return Response(SweepOut(_out(sweep)).data, status=status.HTTP_201_CREATED)


class SweepDetailView(APIView):
    @extend_schema(responses=SweepOut)
    def get(self, request, sweep_id: int):
        return Response(SweepOut(_out(sweep_visible_or_404(user=request.user, sweep_id=sweep_id))).data)


def _controlled(request, sweep_id: int):
    sweep = sweep_visible_or_404(user=request.user, sweep_id=sweep_id)
    if not can_control_job(request.user, sweep):
        raise PermissionDenied("only the sweep's owner (a member of its project) or an admin of its project may "
                               "stop or resume it.")
    return sweep


class SweepStopView(APIView):
    @extend_schema(request=None, responses={202: SweepOut})
    def post(self, request, sweep_id: int):
        sweep = _controlled(request, sweep_id)
        sweep = sweep_stop(sweep_id=sweep.pk, reason=f"stopped by {request.user.username}")
        return Response(SweepOut(_out(sweep)).data, status=status.HTTP_202_ACCEPTED)


class SweepResumeView(APIView):
    @extend_schema(request=None, responses={202: SweepOut})
    def post(self, request, sweep_id: int):
        sweep = _controlled(request, sweep_id)
        if sweep.status != sweep.Status.STOPPED:
            return Response({"detail": f"sweep {sweep.pk} is {sweep.status}: only a stopped sweep resumes."},
                            status=status.HTTP_409_CONFLICT)
        sweep = sweep_resume(sweep_id=sweep.pk)
        return Response(SweepOut(_out(sweep)).data, status=status.HTTP_202_ACCEPTED)

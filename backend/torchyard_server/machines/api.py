from __future__ import annotations

from django.conf import settings
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.permissions import AllowAny, IsAdminUser
from rest_framework.response import Response
from rest_framework.views import APIView
from torchyard import protocol

from ..projects.permissions import StaffWritesOthersRead
from ..rest.openapi import ErrorOut
from . import redis_acl
from .models import Machine
from .selectors import machine_list_json
from .serializers import (
    AgentConfigOut,
    AgentHealthIn,
    MachineIn,
    MachineOut,
    MachinePatch,
    MachineWithTokenOut,
)
from .services import (
    machine_authenticate,
    machine_create,
    machine_delete,
    machine_record_health,
    machine_release,
    machine_rotate_token,
    machine_update,
)


def agent_command(request, token: str) -> str:
    """The join command for a new machine: the server as agents reach it (TORCHYARD_PUBLIC_URL,
    else the address this request came to)."""
    server = settings.PUBLIC_URL or request.build_absolute_uri("/").rstrip("/")
    return f"torchyard agent --server {server} --token {token}"


def force_requested(request) -> bool:
    return request.query_params.get("force", "").lower() in ("1", "true", "yes")


class MachineListView(APIView):
    permission_classes = [StaffWritesOthersRead]

    @extend_schema(responses=MachineOut(many=True))
    def get(self, request):
        # Written by PostgreSQL (selectors.machine_list_json): what MachineOut would write, without
        # a thousand rows read into Python and written out again on every dashboard poll.
        return HttpResponse(machine_list_json(), content_type="application/json")

    @extend_schema(request=MachineIn, responses={201: MachineWithTokenOut})
    def post(self, request):
        data = MachineIn(data=request.data)
        data.is_valid(raise_exception=True)
        machine, token = machine_create(**data.validated_data)
        body = MachineOut(machine).data | {
            "token": token,
            "agent_command": agent_command(request, token),
        }
        return Response(body, status=status.HTTP_201_CREATED)


class MachineDetailView(APIView):
    permission_classes = [StaffWritesOthersRead]

    @extend_schema(responses=MachineOut)
    def get(self, request, machine_id: int):
        return Response(MachineOut(get_object_or_404(Machine, pk=machine_id)).data)

    @extend_schema(request=MachinePatch, responses=MachineOut)
    def patch(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        data = MachinePatch(data=request.data)
        data.is_valid(raise_exception=True)
        fields = dict(data.validated_data)
        if fields.pop("quarantined", None) is False:
            machine = machine_release(machine=machine, why="released by an operator")
        if fields:
            machine = machine_update(machine=machine, **fields)
        return Response(MachineOut(machine).data)

    @extend_schema(parameters=[OpenApiParameter("force", bool, description="stop its live nodes first")],
                   responses={204: None, 409: ErrorOut})
    def delete(self, request, machine_id: int):
        """Remove a machine; 409 while nodes of live jobs run there, unless `?force=true`."""
        machine_delete(machine=get_object_or_404(Machine, pk=machine_id), force=force_requested(request))
        return Response(status=status.HTTP_204_NO_CONTENT)


class MachineRotateTokenView(APIView):
    """A new token for the machine; the old one is refused at once. The machine keeps its id,
    history and jobs; its agent must be restarted with the new token."""

    # Staff only: kept on this view whatever the API's default permission becomes.
    permission_classes = [IsAdminUser]

    @extend_schema(request=None, responses={200: MachineWithTokenOut})
    def post(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        token = machine_rotate_token(machine=machine)
        machine.refresh_from_db()
        body = MachineOut(machine).data | {
            "token": token,
            "agent_command": agent_command(request, token),
        }
        return Response(body)


class AgentConfigView(APIView):
    """What an agent started with `--server URL --token T` needs: its machine and its Redis URL
    (with a user of its own where agent ACLs are on, machines/redis_acl.py).
    Authenticated by the machine token (`Authorization: Machine <token>`), not a user."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(responses={200: AgentConfigOut, 401: ErrorOut})
    def get(self, request):
        kind, _, token = request.headers.get("Authorization", "").partition(" ")
        machine = machine_authenticate(token=token) if kind == "Machine" else None
        if machine is None:
            return Response({"detail": "invalid machine token."}, status=status.HTTP_401_UNAUTHORIZED)
        # Written again here: Redis may have restarted since (its users are not kept on disk).
        redis_acl.try_ensure_user(machine)
        config: protocol.AgentConfig = {
            "machine": {"id": machine.pk, "name": machine.name, "host": machine.host},
            "redis_url": redis_acl.agent_url(machine),
            "storage_url": settings.STORAGE_URL,
            "ca_pem": settings.AGENT_CA_PEM,
        }
        return Response(config)


class AgentHealthView(APIView):
    """An agent's answer to a health check the controller asked for (a quarantined machine whose
    probation is over): a pass releases the machine, a failure starts another probation.
    Authenticated by the machine token (`Authorization: Machine <token>`), not a user."""

    permission_classes = [AllowAny]
    authentication_classes: list = []

    @extend_schema(request=AgentHealthIn, responses={200: MachineOut, 401: ErrorOut})
    def post(self, request):
        kind, _, token = request.headers.get("Authorization", "").partition(" ")
        machine = machine_authenticate(token=token) if kind == "Machine" else None
        if machine is None:
            return Response({"detail": "invalid machine token."}, status=status.HTTP_401_UNAUTHORIZED)
        data = AgentHealthIn(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(MachineOut(machine_record_health(machine=machine, report=data.validated_data)).data)

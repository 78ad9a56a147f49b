"""TransformerLab's "tasks" (`/api/tasks`): saved job templates (app `templates`) in the seed's shape, a
DistributedTrainingConfig with a name, and submitted with `GET /api/tasks/{id}/queue_distributed`
(as saved) or `GET /api/tasks/{id}/queue/{machine_id}` (the whole job on that machine).

The seed queues with GET. A GET that starts a job could be sent by another site in a signed-in
browser (a link, an image), so a GET queues only with an API token, which no other site can add;
the same routes take POST, with the session's CSRF token, from a browser."""

from __future__ import annotations

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.authentication import SessionAuthentication
from rest_framework.exceptions import PermissionDenied
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ...jobs.control.admission import admit_spec
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.models import Job
from ...jobs.spec.secrets import public_spec
from ...machines.models import Machine
from ...projects.permissions import can_control_job, require_submit
from ...rest.openapi import ValidationErrorOut
from ...templates.models import JobTemplate
from ...templates.selectors import template_visible_or_404, templates_visible_to
from ...templates.services import template_delete, template_save, template_submit
from .payloads import DistributedTrainingConfig, job_status, seed_config_of, spec_from_seed
from .serializers import DistributedJobStatusOut, MessageOut


class TaskIn(DistributedTrainingConfig):
    """A task: a name and TransformerLab's DistributedTrainingConfig, or a whole JobSpec in `spec`."""

    name = serializers.CharField(max_length=200, required=False, help_text="default: the plugin's or the spec's name")
    type = serializers.ChoiceField(choices=["TRAIN"], default="TRAIN", help_text="TransformerLab's task type; training only")
    plugin_name = serializers.CharField(max_length=200, required=False)
    spec = JobSpecSerializer(required=False, help_text="Torchyard's: a whole JobSpec instead of TransformerLab's fields")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if ("plugin_name" in attrs) == ("spec" in attrs):
            raise serializers.ValidationError({"plugin_name": ["give either plugin_name (TransformerLab's fields) or spec."]})
        return super().validate(attrs)


class TaskRequirementsOut(serializers.Serializer):
    num_machines = serializers.IntegerField(allow_null=True, help_text="null for a DistroML spec (resources.workers)")
    gpus_per_machine = serializers.IntegerField()
    min_gpu_memory = serializers.IntegerField(help_text="MB per GPU")
    procs_per_machine = serializers.IntegerField(allow_null=True)


class TaskOut(serializers.Serializer):
    """A saved task: TransformerLab's DistributedTrainingConfig of its JobSpec, and the JobSpec itself."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    type = serializers.ChoiceField(choices=["TRAIN"])
    plugin_name = serializers.CharField(help_text="a built-in recipe's short name, or the entrypoint in the job's code")
    config = serializers.DictField(help_text="the hyperparameters")
    resource_requirements = TaskRequirementsOut()
    machine_selection = serializers.ChoiceField(choices=["auto", "manual"])
    selected_machines = serializers.ListField(child=serializers.CharField())
    args = serializers.ListField(child=serializers.CharField())
    project = serializers.CharField()
    owner = serializers.CharField()
    spec = serializers.DictField(help_text="the JobSpec it submits; secret_env values as ***")
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


def _task(template: JobTemplate) -> dict[str, Any]:
    return TaskOut({
        **seed_config_of(template.spec), "id": template.pk, "name": template.name, "type": "TRAIN",
        "project": template.project.name, "owner": template.owner.get_username(),
        "spec": public_spec(template.spec), "created_at": template.created_at, "updated_at": template.updated_at,
    }).data


def _spec_of(request) -> dict[str, Any]:
    body = TaskIn(data=request.data)
    body.is_valid(raise_exception=True)
    data = body.validated_data
    if "spec" in data:
        return admit_spec({**data["spec"], "name": data.get("name") or data["spec"]["name"]}, user=request.user,
                          under="spec")
    return spec_from_seed(data, request, name=data.get("name"))


def _require_control(user, template: JobTemplate) -> None:
    # The rule of jobs: its owner (a member of the project) or an admin of the project.
    if not can_control_job(user, template):
        raise PermissionDenied("only the task's owner (a member of its project) or an admin of its project may change or delete it.")


class TaskListView(APIView):
    @extend_schema(responses=TaskOut(many=True), parameters=[OpenApiParameter("project", str, description="only this project's tasks")])
    def get(self, request):
        templates = templates_visible_to(request.user)
        if request.query_params.get("project"):
            templates = templates.filter(project__name=request.query_params["project"])
        return Response([_task(t) for t in templates])

    @extend_schema(request=TaskIn, responses={201: TaskOut})
    def post(self, request):
        template = template_save(spec=_spec_of(request), owner=request.user)
        return Response(_task(template), status=status.HTTP_201_CREATED)


class TaskDetailView(APIView):
    @extend_schema(responses=TaskOut)
    def get(self, request, task_id: int):
        return Response(_task(template_visible_or_404(user=request.user, template_id=task_id)))

    @extend_schema(request=TaskIn, responses=TaskOut)
    def put(self, request, task_id: int):
        """Replace the task (the same body as creating one); its owner stays."""
        template = template_visible_or_404(user=request.user, template_id=task_id)
        _require_control(request.user, template)
        return Response(_task(template_save(spec=_spec_of(request), template=template)))

    @extend_schema(responses={200: MessageOut})
    def delete(self, request, task_id: int):
        template = template_visible_or_404(user=request.user, template_id=task_id)
        _require_control(request.user, template)
        template_delete(template=template)
        return Response({"message": f"task {task_id} deleted"})


class GetNeedsAToken(BasePermission):
    """A GET that starts a job must carry an API token (see the module's docstring)."""

    message = ("a browser session queues a task with POST (and its CSRF token); GET queues only with an "
               "API token, so that a link on another site cannot start a job.")

    def has_permission(self, request, view) -> bool:
        return request.method != "GET" or not isinstance(request.successful_authenticator, SessionAuthentication)


def _queue(request, task_id: int, machine_id: int | None = None) -> Response:
    template = template_visible_or_404(user=request.user, template_id=task_id)
    require_submit(request.user, template.project)
    machine = get_object_or_404(Machine, pk=machine_id) if machine_id is not None else None
    job = template_submit(template=template, owner=request.user, machine_name=machine.name if machine else None)
    return Response(DistributedJobStatusOut(job_status(Job.objects.get(pk=job.pk))).data, status=status.HTTP_201_CREATED)


# 400: the machines can never hold the job (PlanError: `detail`, and why for each machine in `skipped`).
QUEUED = {201: DistributedJobStatusOut, 400: ValidationErrorOut}


class TaskQueueDistributedView(APIView):
    """Submit the task as a job, as saved (TransformerLab's "queue task for distributed training"); by
    the task's id, or by the job_id distributed/plan answered for it (`plan-12`)."""

    permission_classes = [IsAuthenticated, GetNeedsAToken]

    @extend_schema(request=None, responses=QUEUED)
    def get(self, request, task_id: int):
        return _queue(request, task_id)

    @extend_schema(request=None, responses=QUEUED)
    def post(self, request, task_id: int):
        return _queue(request, task_id)


class TaskQueueOnMachineView(APIView):
    """Submit the task as a job on one machine: one node with every process of the job."""

    permission_classes = [IsAuthenticated, GetNeedsAToken]

    @extend_schema(request=None, responses=QUEUED)
    def get(self, request, task_id: int, machine_id: int):
        return _queue(request, task_id, machine_id)

    @extend_schema(request=None, responses=QUEUED)
    def post(self, request, task_id: int, machine_id: int):
        return _queue(request, task_id, machine_id)

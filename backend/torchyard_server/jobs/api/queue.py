"""`GET /api/queue`: the queued jobs a user may see, in queue order, each with its place and why it
waits (what a queue pass would decide now: jobs/placement/queue.py); `PATCH /api/jobs/{id}`'s body."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ...projects.models import Project
from ...projects.permissions import visible_project_ids
from ...projects.serializers import PriorityField
from ..placement.queue import CAPACITY, HEAD, INVALID, QUOTA, RESOURCES, queue_entries, queue_preview


class QueueEntryOut(serializers.Serializer):
    id = serializers.IntegerField()
    name = serializers.CharField()
    project = serializers.CharField()
    owner = serializers.CharField()
    status = serializers.CharField(help_text="queued, or preempted: it yielded to a higher-priority job and resumes "
                                   "from its checkpoint when it runs again (both wait alike)")
    priority = serializers.IntegerField(help_text="higher first; low -10, normal 0, high 10")
    position = serializers.IntegerField(help_text="1 for the first in line, in the whole queue (every project)")
    reason = serializers.CharField(help_text="why it waits, in words (the planner's, then the queue's); "
                                   "\"starting\" when the next pass starts it")
    blocked_by = serializers.ChoiceField(
        choices=[RESOURCES, CAPACITY, QUOTA, HEAD, INVALID], allow_null=True, help_text=(
            "resources: too few free GPUs or cores now; capacity: the machines online could never hold it; quota: "
            "its project is at its quota; head: it fits now but would delay the first in line; invalid: it can never "
            "run (it fails at the next pass); null: it starts at the next pass"))
    head = serializers.BooleanField(help_text="the first in line that cannot start: what backfill may not delay")
    borrowing = serializers.BooleanField(help_text="past its project's quota: it may only borrow idle capacity")
    backfill = serializers.BooleanField(help_text="it starts ahead of the head, which it cannot delay")
    expected_start = serializers.DateTimeField(allow_null=True, help_text=(
        "the head's: when the running jobs' time limits and ETAs say it fits; null when unknown or not the head"))
    submitted_at = serializers.DateTimeField()
    waiting_since = serializers.DateTimeField(help_text="when it last entered the queue")
    gpus = serializers.IntegerField(help_text="GPUs it asks (its plan's, or the least its spec runs on)")
    processes = serializers.IntegerField()


class QueueOut(serializers.Serializer):
    jobs = QueueEntryOut(many=True)
    total = serializers.IntegerField(help_text="queued jobs in the whole queue, those you cannot see included")


class JobPatchIn(serializers.Serializer):
    priority = PriorityField(help_text="low, normal, high or an integer from -100 to 100; at most the project's "
                                       "priority_ceiling (staff are not capped)")


def visible_entries(entries: list[dict], user, project: str | None = None) -> list[dict]:
    visible = visible_project_ids(user)
    names = None if visible is None else set(_project_names(visible))
    return [e for e in entries if (names is None or e["project"] in names) and (not project or e["project"] == project)]


def _project_names(ids: set[int]) -> list[str]:
    return list(Project.objects.filter(pk__in=ids).values_list("name", flat=True))


class QueueView(APIView):
    @extend_schema(responses=QueueOut, parameters=[
        OpenApiParameter("project", str, description="only this project's queued jobs"),
    ])
    def get(self, request):
        """The queue, first in line first: your projects' jobs, with their place in the whole queue."""
        entries = queue_entries(queue_preview())
        jobs = visible_entries(entries, request.user, request.query_params.get("project") or None)
        return Response(QueueOut({"jobs": jobs, "total": len(entries)}).data)

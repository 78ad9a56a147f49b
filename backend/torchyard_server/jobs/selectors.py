from __future__ import annotations

from typing import Any

from django.db.models import Q, QuerySet

from ..machines.registries import ProjectUsage
from ..projects.permissions import scope_to_user, visible_or_404
from .models import Job, JobNode
from .states import JOB_WAITING, NODE_LIVE


def job_list(*, statuses: list[str] | None = None, project: str | None = None, user: Any = None) -> QuerySet[Job]:
    """Every job, newest first, or (given a user) only those of the projects they may see; only
    those in `statuses` and of the project named `project` when given."""
    qs = Job.objects.select_related("owner", "project").order_by("-id")
    if user is not None:
        qs = scope_to_user(qs, user)
    if statuses:
        qs = qs.filter(status__in=statuses)
    if project:
        qs = qs.filter(project__name=project)
    return qs


def jobs_visible_to(user: Any) -> QuerySet[Job]:
    return scope_to_user(Job.objects.select_related("owner", "project"), user)


def job_visible_or_404(*, user: Any, job_id: int) -> Job:
    """The job, if this user may see it (projects.permissions); else 404, whether or not it exists."""
    return visible_or_404(Job.objects.select_related("owner", "project").prefetch_related("nodes"), user,
                          what="job", pk=job_id)


def job_get(*, job_id: int) -> Job | None:
    return Job.objects.select_related("owner", "project").prefetch_related("nodes").filter(pk=job_id).first()


def usage_by_machine() -> dict[int, list[ProjectUsage]]:
    """What live nodes take on each machine, per project (machines.registries): a project's name
    and counts, never a job, since every signed-in user sees the cluster."""
    live = JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False).values_list(
        "machine_id", "job__project__name", "gpus", "nproc")
    totals: dict[tuple[int, str], list[int]] = {}
    for machine_id, project, gpus, nproc in live:
        taken = totals.setdefault((machine_id, project), [0, 0])
        taken[0] += len(gpus or [])
        taken[1] += nproc
    usage: dict[int, list[ProjectUsage]] = {}
    for (machine_id, project), (gpus, processes) in sorted(totals.items()):
        usage.setdefault(machine_id, []).append({"project": project, "gpus": gpus, "processes": processes})
    return usage


def waiting_ahead_of(job: Job) -> list[tuple[int, int]]:
    """(id, priority) of the waiting jobs (queued, preempted) that come before `job` in the queue's
    order (jobs/placement/queue.py: priority, then submission), first in line first."""
    ahead = Q(priority__gt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at) | Q(
        priority=job.priority, created_at=job.created_at, pk__lt=job.pk)
    return list(Job.objects.filter(ahead, status__in=JOB_WAITING).exclude(pk=job.pk)
                .order_by("-priority", "created_at", "id").values_list("id", "priority"))

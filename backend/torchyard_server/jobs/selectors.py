from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db.models import Q, QuerySet
from django.utils import timezone

from ..machines.selectors import machine_list
from ..machines.volumes import merged_volumes
from ..projects.permissions import scope_to_user, visible_or_404
from .models import Job, JobNode
from .plan import Plan
from .planner import Candidate
from .states import JOB_WAITING, NODE_LIVE, SPARES_HELD


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


def usage_by_machine() -> dict[int, list[dict[str, Any]]]:
    """What live nodes take on each machine, per project (machines.registries): a project's name
    and counts, never a job, since every signed-in user sees the cluster."""
    live = JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False).values_list(
        "machine_id", "job__project__name", "gpus", "nproc")
    totals: dict[tuple[int, str], list[int]] = {}
    for machine_id, project, gpus, nproc in live:
        taken = totals.setdefault((machine_id, project), [0, 0])
        taken[0] += len(gpus or [])
        taken[1] += nproc
    usage: dict[int, list[dict[str, Any]]] = {}
    for (machine_id, project), (gpus, processes) in sorted(totals.items()):
        usage.setdefault(machine_id, []).append({"project": project, "gpus": gpus, "processes": processes})
    return usage


def waiting_ahead_of(job: Job) -> list[tuple[int, int]]:
    """(id, priority) of the waiting jobs (queued, preempted) that come before `job` in the queue's
    order (jobs/queue.py: priority, then submission), first in line first."""
    ahead = Q(priority__gt=job.priority) | Q(priority=job.priority, created_at__lt=job.created_at) | Q(
        priority=job.priority, created_at=job.created_at, pk__lt=job.pk)
    return list(Job.objects.filter(ahead, status__in=JOB_WAITING).exclude(pk=job.pk)
                .order_by("-priority", "created_at", "id").values_list("id", "priority"))


def held_spares(*, exclude_job: int | None = None) -> list[tuple[int, list[int], int]]:
    """(machine id, GPUs, processes) of every hot spare a live job holds (resources.spares; its plan
    names them): held as if a node of the job ran there, so no other job is planned onto them."""
    held = []
    for job_id, stored in Job.objects.filter(status__in=SPARES_HELD).values_list("pk", "plan"):
        if job_id != exclude_job:
            plan = Plan.from_json(stored)
            held += [(int(s.machine_id), list(s.gpus), int(plan.procs_per_node or 1)) for s in plan.spares or []]
    return held


def machine_candidates(*, exclude_job: int | None = None) -> list[Candidate]:
    """Snapshots for the planner: every machine with what live nodes already hold on it. Here and
    not in machines, which sits below jobs and knows nothing of nodes. `exclude_job`: as if that
    job's own nodes were gone (would the job fit larger once it stops?)."""
    live = JobNode.objects.filter(status__in=NODE_LIVE, machine__isnull=False)
    if exclude_job is not None:
        live = live.exclude(job_id=exclude_job)
    live = live.values_list("machine_id", "gpus", "nproc")
    live_nodes: dict[int, int] = {}
    busy_procs: dict[int, int] = {}
    busy_gpus: dict[int, set[int]] = {}
    for machine_id, gpus, nproc in [*live, *held_spares(exclude_job=exclude_job)]:
        live_nodes[machine_id] = live_nodes.get(machine_id, 0) + 1
        busy_procs[machine_id] = busy_procs.get(machine_id, 0) + nproc
        busy_gpus.setdefault(machine_id, set()).update(gpus or [])
    # Offline with a heartbeat too recent for the offline sweep: a lost node made it suspect.
    now = timezone.now()
    quiet_since = now - timedelta(seconds=settings.MACHINE_OFFLINE_AFTER)
    return [
        Candidate(
            id=m.pk,
            name=m.name,
            host=m.host,
            status=m.status,
            cpu_count=int(m.capabilities.get("cpu_count") or 0),
            gpus=list(m.capabilities.get("gpus") or []),
            busy_gpus=busy_gpus.get(m.pk, set()),
            live_nodes=live_nodes.get(m.pk, 0),
            busy_procs=busy_procs.get(m.pk, 0),
            cpu_usage=float(m.current_load.get("cpu_usage") or 0.0),
            python_version=str(m.capabilities.get("python_version") or ""),
            torch_version=str(m.capabilities.get("torch_version") or ""),
            suspect=m.status == "offline" and m.last_heartbeat is not None and m.last_heartbeat > quiet_since,
            quarantine_reason=m.quarantine_reason if m.quarantined_at is not None else "",
            volumes={v["name"]: v for v in merged_volumes(m.volumes, m.capabilities)},
            labels=dict(m.labels or {}),
            memory_total=int(m.capabilities.get("memory") or 0),
            # The agent reports memory in use as a percentage of the total.
            memory_free=int(int(m.capabilities.get("memory") or 0)
                            * (1 - float(m.current_load.get("memory_usage") or 0.0) / 100)),
        )
        for m in machine_list()
    ]

"""Project quotas (`max_gpus`, `max_processes`: what a project's running jobs may hold at once) in
the numbers the queue (jobs/placement/queue.py) and the control side use: a job's need, what a project holds,
whether more would take it past its quota, in words."""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Q

from ...projects.models import Project
from ..models import Job, JobNode
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan
from ..states import NODE_LIVE
from .planner import plural


@dataclass
class Quota:
    name: str
    max_gpus: int | None
    max_processes: int | None
    borrow: bool

    @classmethod
    def of(cls, project: Project) -> Quota | None:
        if project.max_gpus is None and project.max_processes is None:
            return None
        return cls(project.name, project.max_gpus, project.max_processes, project.borrow)


def over_quota(quota: Quota | None, held: tuple[int, int], need: tuple[int, int]) -> str | None:
    """Why `need` (GPUs, processes) more would take the project past its quota, in words; None when
    it would not. A job that asks none of a limited resource is never held back by that limit."""
    if quota is None:
        return None
    parts = []
    if quota.max_gpus is not None and need[0] and held[0] + need[0] > quota.max_gpus:
        parts.append(f"{plural(quota.max_gpus, 'GPU')} ({held[0]} held, {need[0]} asked)")
    if quota.max_processes is not None and need[1] and held[1] + need[1] > quota.max_processes:
        parts.append(f"{plural(quota.max_processes, 'process')} ({held[1]} held, {need[1]} asked)")
    return f"project {quota.name} is at its quota of {' and '.join(parts)}" if parts else None


def plan_need(plan: Plan) -> tuple[int, int]:
    """GPUs and processes a plan takes."""
    return sum(len(n.gpus) for n in plan.nodes), sum(int(n.nproc) for n in plan.nodes)


def least_need(spec: JobSpec) -> tuple[int, int]:
    """GPUs and processes of the smallest run the spec allows (an elastic job's fewest nodes)."""
    resources = spec.resources
    if resources.workers is not None:
        return int(resources.workers) * int(resources.gpus_per_worker or 0), int(resources.workers)
    nodes = resources.fewest_nodes
    return nodes * int(resources.gpus_per_node or 0), nodes * int(resources.procs_per_node or 1)


def project_quotas() -> dict[int, Quota]:
    """Every project that has a quota, by id."""
    return {project.pk: quota for project in Project.objects.filter(
        Q(max_gpus__isnull=False) | Q(max_processes__isnull=False)) if (quota := Quota.of(project)) is not None}


def held_by_project(*, exclude_job: int | None = None) -> dict[int, tuple[int, int]]:
    """GPUs and processes each project's live nodes hold now (also projects.registries)."""
    live = JobNode.objects.filter(status__in=NODE_LIVE)
    if exclude_job is not None:
        live = live.exclude(job_id=exclude_job)
    held: dict[int, tuple[int, int]] = {}
    for project_id, gpus, procs in live.values_list("job__project_id", "gpus", "nproc"):
        g, p = held.get(project_id, (0, 0))
        held[project_id] = (g + len(gpus or []), p + procs)
    return held


def beyond_quota(project: Project, spec: JobSpec) -> str | None:
    """Why a job could never start within its project's quota when the project may not borrow
    (submission refuses it: it would wait forever); None otherwise. A job with `preemptible: false`
    never borrows (borrowed capacity is what preemption takes back), so for it borrowing does not count."""
    quota = Quota.of(project)
    pinned = not spec.may_be_preempted
    if quota is None or (quota.borrow and not pinned):
        return None
    over = over_quota(quota, (0, 0), least_need(spec))
    if not over:
        return None
    why = f"the job can never start: {over.replace('is at its quota of', 'has a quota of')}"
    return why + (" (preemptible: false runs only within its project's quota, never borrowing)" if pinned else "")


def growth_beyond_quota(job: Job, plan: Plan) -> bool:
    """Whether growing an elastic job to `plan` would take its project past its quota (a project
    that may borrow grows on idle capacity like any borrower)."""
    quota = Quota.of(job.project)
    if quota is None or quota.borrow:
        return False
    held = held_by_project(exclude_job=job.pk).get(job.project_id, (0, 0))
    return over_quota(quota, held, plan_need(plan)) is not None

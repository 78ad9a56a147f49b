"""A new job: refused when no machine could ever hold it, otherwise queued for the next queue pass."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone
from torchyard import protocol

from ...audit import services as audit
from ...celery import app as celery_app
from ...projects.models import DEFAULT_PROJECT
from ...projects.selectors import project_by_name
from ..events import publish_on_commit
from ..models import Job, JobNode
from ..placement.candidates import PlanError
from ..placement.quotas import beyond_quota
from ..queue_poke import queue_poke_on_commit
from ..spec.jobspec import JobSpec
from ..spec.progress import JobProgress
from .dispatch import job_preview_plan

J, N = Job.Status, JobNode.Status


# --- submit, schedule, dispatch ------------------------------------------------------------------
def job_submit(*, spec: JobSpec, owner) -> Job:
    """Create a queued job. Refuses (PlanError) a spec that the online machines can never hold,
    except an elastic one short of machines: it waits, saying why, until enough of them join."""
    try:
        job_preview_plan(spec=spec)
    except PlanError as exc:
        if exc.kind != "busy" and not (exc.kind == "capacity" and spec.is_elastic):
            raise
    with transaction.atomic():
        project = project_by_name(spec.project or DEFAULT_PROJECT)
        if project is not None and (too_big := beyond_quota(project, spec)):
            raise PlanError(too_big, kind="capacity")
        job = Job.objects.create(
            name=spec.name, spec=spec.to_json(), owner=owner, project=project, progress=_initial_progress(spec).to_json(),
            priority=int(spec.priority or 0), queued_at=timezone.now(),
        )
        publish_on_commit(
            {"type": protocol.STATE, "job": job.pk, "attempt": 0, "scope": "job",
             "status": J.QUEUED, "previous": None, "reason": "submitted"}
        )
        audit.record(None, audit.Action.JOB_SUBMIT, job, resources=spec.resources.to_json())
        # A queue pass (jobs/placement/queue.py), shared with whatever else asked for one meanwhile.
        queue_poke_on_commit()
    return job


def _initial_progress(spec: JobSpec) -> JobProgress:
    args = spec.args
    total = None
    if "--steps" in args:
        i = args.index("--steps")
        if i + 1 < len(args) and args[i + 1].isdigit():
            total = int(args[i + 1])
    return JobProgress(total_steps=total)


def _send_control(task_name: str, *args: Any) -> None:
    celery_app.send_task(task_name, args=args, queue=protocol.CONTROL_QUEUE)

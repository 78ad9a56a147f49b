"""A whole job under the caller's own TransformerLab job_id: a DistributedTrainingConfig dispatched with
`"job_id": "dist_job_123"` (or execute_job's `job_id`) is submitted as any whole job, and the id is
kept (NamedJob) so that the status and stop routes take it, as they take a per-rank dispatch's.

One id names one live job of its owner: a second submission under an id whose job is still live,
or whose ranks are still coming in, is refused with a sentence saying which job holds it and how
to stop it. Once that job has ended the id may be used again, and then follows the newest job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from rest_framework import serializers

from ...jobs.control.submit import job_submit
from ...jobs.models import Job
from ...jobs.spec.jobspec import JobSpec
from ...jobs.states import JOB_LIVE
from .models import NamedJob, RankDispatch
from .payloads import DistributedTrainingConfig
from .plans import is_torchyard_id, own_id_refusal, plan_number

# Ranks of a per-rank dispatch whose other ranks never came are forgotten after this long.
RANK_DISPATCH_WINDOW = timedelta(minutes=10)


class NamedDispatchIn(DistributedTrainingConfig):
    """A whole job (TransformerLab's DistributedTrainingConfig) under your own job_id: poll and stop it
    with that id on every route that takes one."""

    job_id = serializers.CharField(max_length=100, help_text=(
        "your own name for the job (dist_job_123): the status and stop routes take it. Never digits "
        "(Torchyard's job ids) nor plan-<number> (a plan's job_id: that dispatches the plan)"))

    def validate_job_id(self, value: str) -> str:
        if refusal := own_id_refusal(value):
            raise serializers.ValidationError(refusal)
        return value


def is_named_dispatch(body: Any) -> bool:
    """A whole job that names itself: a job_id that is neither Torchyard's nor a plan's, and a plugin."""
    if not isinstance(body, dict) or not isinstance(body.get("job_id"), str) or "plugin_name" not in body:
        return False
    return plan_number(body["job_id"]) is None and not is_torchyard_id(body["job_id"])


def lock_user_dispatches(user: Any) -> None:
    """One dispatch of this user at a time (inside a transaction): two requests naming the same job_id
    must not both find it free. The lock every write of a TransformerLab job_id takes; it also forgets
    the user's ranks that waited for the others longer than RANK_DISPATCH_WINDOW."""
    get_user_model().objects.select_for_update().filter(pk=user.pk).first()
    RankDispatch.objects.filter(owner=user, job=None, created_at__lt=timezone.now() - RANK_DISPATCH_WINDOW).delete()


def _held(key: str, job: Job) -> str:
    stop = f"POST /api/network/distributed/stop/{key}"
    if job.status == Job.Status.STOPPING:
        return f"your job {key} (job {job.pk}) is still stopping: wait until it has stopped, or give this job another job_id."
    return (f"your job {key} (job {job.pk}) is still {job.status}: stop it first ({stop}), or give this job "
            "another job_id.")


def id_in_use(*, user: Any, key: str, rows: list[RankDispatch] | None = None) -> str | None:
    """Why `key` cannot name a new job of this user now, in a sentence (the caller holds
    lock_user_dispatches); None when it is free: no live job holds it, no ranks of it are coming in."""
    named = NamedJob.objects.filter(owner=user, key=key).select_related("job").first()
    if named is not None and named.job.status in JOB_LIVE:
        return _held(key, named.job)
    if rows is None:
        rows = list(RankDispatch.objects.filter(owner=user, key=key).select_related("job").order_by("rank"))
    if rows and rows[0].job_id is None:
        return (f"ranks of your job {key} are coming in (rank(s) {', '.join(str(r.rank) for r in rows)} of "
                f"{rows[0].world_size}): send the others, or drop them (POST /api/network/distributed/stop/{key}), "
                "or give this job another job_id.")
    if rows and rows[0].job is not None and rows[0].job.status in JOB_LIVE:
        return _held(key, rows[0].job)
    return None


def named_job_submit(*, user: Any, key: str, spec: dict[str, Any]) -> Job:
    """Submit the validated spec as a job known by `key` too; refused (a field error on job_id) while
    the id names a live job of this user or ranks of it are coming in."""
    with transaction.atomic():
        lock_user_dispatches(user)
        if refusal := id_in_use(user=user, key=key):
            raise serializers.ValidationError({"job_id": [refusal]})
        job = job_submit(spec=JobSpec.from_json(spec), owner=user)
        NamedJob.objects.update_or_create(owner=user, key=key, defaults={"job": job})
    return job

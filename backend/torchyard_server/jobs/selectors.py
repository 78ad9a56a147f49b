from __future__ import annotations

from django.db.models import QuerySet

from .models import Job


def job_list(*, status: str | None = None) -> QuerySet[Job]:
    qs = Job.objects.select_related("owner").order_by("-id")
    if status:
        qs = qs.filter(status=status)
    return qs


def job_get(*, job_id: int) -> Job | None:
    return Job.objects.select_related("owner").prefetch_related("nodes").filter(pk=job_id).first()

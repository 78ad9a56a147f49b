from __future__ import annotations

from django.db.models import QuerySet

from .models import JobEvent


def _window(job_id: int, after: int, before: int | None) -> QuerySet[JobEvent]:
    qs = JobEvent.objects.filter(job_id=job_id, id__gt=after)
    return qs if before is None else qs.filter(id__lt=before)


def job_events(*, job_id: int, after: int = 0, before: int | None = None, types: list[str] | None = None,
               rank: int | None = None, limit: int = 1000) -> QuerySet[JobEvent]:
    qs = _window(job_id, after, before)
    if types:
        qs = qs.filter(type__in=types)
    if rank is not None:
        qs = qs.filter(rank=rank)
    return qs.order_by("id")[:limit]


def job_events_tail(*, job_id: int, count: int, after: int = 0, before: int | None = None,
                    types: list[str] | None = None, rank: int | None = None) -> list[JobEvent]:
    """The last `count` events after the cursor (and below `before`), oldest first (`tail -n`)."""
    qs = _window(job_id, after, before)
    if types:
        qs = qs.filter(type__in=types)
    if rank is not None:
        qs = qs.filter(rank=rank)
    return list(reversed(qs.order_by("-id")[:count]))

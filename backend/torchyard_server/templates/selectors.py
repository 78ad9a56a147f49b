from __future__ import annotations

from typing import Any

from django.db.models import QuerySet

from ..jobs.models import Job
from ..projects.permissions import scope_to_user, visible_or_404
from .models import JobTemplate


def templates_visible_to(user: Any) -> QuerySet[JobTemplate]:
    """The templates of the projects this user may see (projects.permissions), newest first."""
    return scope_to_user(JobTemplate.objects.select_related("owner", "project"), user)


def template_visible_or_404(*, user: Any, template_id: int) -> JobTemplate:
    return visible_or_404(JobTemplate.objects.select_related("owner", "project"), user,
                          what="task (job template)", pk=template_id)


def template_latest_job(*, template: JobTemplate) -> Job | None:
    """The newest job submitted from the template (services.template_job_record), or None."""
    return template.jobs.order_by("-id").first()

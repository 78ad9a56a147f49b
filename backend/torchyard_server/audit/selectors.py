from __future__ import annotations

from datetime import datetime

from django.db.models import QuerySet

from .models import AuditEntry


def audit_entries(*, actor: str = "", action: str = "", target_type: str = "", target_id: str = "",
                  project: str = "", since: datetime | None = None, until: datetime | None = None) -> QuerySet[AuditEntry]:
    """Newest first; every filter given must match (`since` inclusive, `until` exclusive)."""
    qs = AuditEntry.objects.select_related("project").order_by("-id")
    exact = {"actor_label": actor, "action": action, "target_type": target_type, "target_id": target_id,
             "project__name": project}
    qs = qs.filter(**{field: value for field, value in exact.items() if value})
    if since is not None:
        qs = qs.filter(created__gte=since)
    if until is not None:
        qs = qs.filter(created__lt=until)
    return qs

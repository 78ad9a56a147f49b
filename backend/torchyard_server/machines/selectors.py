from __future__ import annotations

from django.db.models import QuerySet

from .models import Machine


def machine_list() -> QuerySet[Machine]:
    return Machine.objects.all().order_by("name")

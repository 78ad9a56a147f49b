"""Reads of API tokens."""

from __future__ import annotations

from django.db.models import Q, QuerySet
from django.utils import timezone

from .models import ApiToken


def api_tokens_of(*, user) -> QuerySet[ApiToken]:
    """The user's live tokens, newest first. Knox deletes an expired token when it is next
    presented; until then it is dead already and not listed."""
    now = timezone.now()
    return ApiToken.objects.filter(user=user).filter(Q(expiry__isnull=True) | Q(expiry__gt=now))

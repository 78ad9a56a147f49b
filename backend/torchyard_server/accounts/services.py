"""Every write to API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from .models import ApiToken

# A token's last use is written at most this often: one UPDATE a minute, not one a request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_create(*, user, name: str, expires_in: timedelta | None) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the token itself, which exists in clear only
    in this answer (the row keeps its SHA-512 digest)."""
    return ApiToken.objects.create(user=user, name=name, expiry=expires_in)


def api_token_revoke(*, user, token_id: int) -> bool:
    """Delete one of the user's own tokens; False when they have none with this id."""
    deleted, _ = ApiToken.objects.filter(user=user, pk=token_id).delete()
    return deleted > 0


def api_token_touch(*, token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used is None or now - token.last_used >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now

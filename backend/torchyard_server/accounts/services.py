"""Every write to API tokens."""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ..audit import services as audit
from .models import ApiToken

# A token's last use is written at most this often: one UPDATE a minute, not one a request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def api_token_create(*, user, name: str, expires_in: timedelta | None) -> tuple[ApiToken, str]:
    """A new token for `user`; returns the row and the token itself, which exists in clear only
    in this answer (the row keeps its SHA-512 digest)."""
    with transaction.atomic():
        token, key = ApiToken.objects.create(user=user, name=name, expiry=expires_in)
        # A Target, not the row: the row's own label would carry its digest.
        audit.record(None, audit.Action.TOKEN_CREATE, audit.Target("token", str(token.pk), token.name),
                     owner=user.username, expiry=token.expiry.isoformat() if token.expiry else None)
    return token, key


def api_token_revoke(*, user, token_id: int) -> bool:
    """Delete one of the user's own tokens; False when they have none with this id."""
    with transaction.atomic():
        token = ApiToken.objects.filter(user=user, pk=token_id).first()
        if token is None:
            return False
        audit.record(None, audit.Action.TOKEN_REVOKE, audit.Target("token", str(token.pk), token.name),
                     owner=user.username)
        token.delete()
    return True


def api_token_touch(*, token: ApiToken) -> None:
    now = timezone.now()
    if token.last_used is None or now - token.last_used >= LAST_USED_RESOLUTION:
        ApiToken.objects.filter(pk=token.pk).update(last_used=now)
        token.last_used = now

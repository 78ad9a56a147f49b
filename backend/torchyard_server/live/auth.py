"""WebSocket authentication: the dashboard's session cookie, or an API token for scripts
(`Authorization: Token <t>` header, or `?token=<t>` where a client cannot set headers)."""

from __future__ import annotations

from urllib.parse import parse_qs

from channels.auth import AuthMiddlewareStack
from channels.db import database_sync_to_async
from channels.security.websocket import OriginValidator
from django.conf import settings
from django.contrib.auth.models import AnonymousUser

from ..accounts.auth import user_for_token


@database_sync_to_async
def _user_for_token(key: str):
    # The REST API's own check (knox): an unknown, expired or revoked token signs in nobody.
    return user_for_token(key) or AnonymousUser()


def _token_from_scope(scope) -> str | None:
    for name, value in scope.get("headers", []):
        if name == b"authorization":
            kind, _, key = value.decode("latin-1").partition(" ")
            if kind.lower() == "token" and key:
                return key.strip()
    query = parse_qs(scope.get("query_string", b"").decode())
    return (query.get("token") or [None])[0]


class TokenAuthMiddleware:
    def __init__(self, inner):
        self.inner = inner

    async def __call__(self, scope, receive, send):
        key = _token_from_scope(scope)
        if key:
            scope = dict(scope, user=await _user_for_token(key))
        return await self.inner(scope, receive, send)


def TokenOrSessionAuthMiddleware(inner):  # noqa: N802 - reads like the Channels stacks it wraps
    # Session first (sets scope["user"]); a token, when given, decides.
    return AuthMiddlewareStack(TokenAuthMiddleware(inner))


class _MissingOriginAllowed(OriginValidator):
    """Browsers always send Origin on a WebSocket handshake, and that is what cross-site checks
    are for; scripts and the CLI send none and authenticate with a token instead."""

    def valid_origin(self, parsed_origin):
        return parsed_origin is None or super().valid_origin(parsed_origin)


def BrowserOriginValidator(application):  # noqa: N802 - mirrors AllowedHostsOriginValidator
    allowed = list(settings.ALLOWED_HOSTS)
    if settings.DEBUG and not allowed:
        allowed = ["localhost", "127.0.0.1", "[::1]"]
    return _MissingOriginAllowed(application, allowed)

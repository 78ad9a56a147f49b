"""`Authorization: Token <t>` for REST and WebSocket: knox's authentication (hashed tokens, expiry
honoured, an expired token deleted when presented), which also notes when a token was last used."""

from __future__ import annotations

from knox.auth import TokenAuthentication
from rest_framework.exceptions import AuthenticationFailed

from .services import api_token_touch


class ApiTokenAuthentication(TokenAuthentication):
    def authenticate_credentials(self, token: bytes):
        # Knox decodes the header as UTF-8; a header that is not (sent as Latin-1) is no token of
        # ours, and a 401, not a crash.
        try:
            token.decode("utf-8")
        except UnicodeDecodeError:
            raise AuthenticationFailed("Invalid token.") from None
        return super().authenticate_credentials(token)

    def validate_user(self, auth_token):
        user, token = super().validate_user(auth_token)
        api_token_touch(token=token)
        return user, token


def user_for_token(key: str):
    """The active user a token belongs to, or None (unknown, expired, revoked, user inactive)."""
    try:
        user, _ = ApiTokenAuthentication().authenticate_credentials(key.encode())
    except (AuthenticationFailed, UnicodeEncodeError):
        return None
    return user

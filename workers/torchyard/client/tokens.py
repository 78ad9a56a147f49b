"""Your API tokens: `torchyard login` signs in with a password and gets a new named token;
`torchyard token create|list|revoke` manage them with a token you already have.

A new token is printed alone on stdout (so `export TORCHYARD_TOKEN=$(torchyard login)` works) and
what it is on stderr; it is shown this once, the server keeps only its hash.
"""

from __future__ import annotations

import socket
from datetime import datetime
from typing import NotRequired, TypedDict

from rich.console import Console

from .http import ApiClient
from .output import say


def default_token_name() -> str:
    return f"cli on {socket.gethostname()}"


class TokenSpec(TypedDict):
    """A new token's name and life (the REST schema's TokenSpecIn)."""

    name: str
    expires_in_days: NotRequired[int | None]


class ApiToken(TypedDict):
    """A token as GET /api/auth/tokens lists it (ApiTokenOut); a new one also has its `token`, shown
    once, and its user's name (ApiTokenCreatedOut)."""

    id: int
    name: str
    prefix: str
    created: str
    expiry: str | None
    last_used: str | None
    token: NotRequired[str]
    username: NotRequired[str]


def token_spec(name: str, expires_days: int | None) -> TokenSpec:
    spec: TokenSpec = {"name": name}
    if expires_days is not None:
        spec["expires_in_days"] = expires_days
    return spec


def sign_in(api: ApiClient, *, username: str, password: str, name: str, expires_days: int | None) -> ApiToken:
    """`POST /api/auth/token`: a new token of this user's (the password is the credential)."""
    return api.call("POST", "/api/auth/token", {"username": username, "password": password,
                                                 **token_spec(name, expires_days)}, anonymous=True)


def create_token(api: ApiClient, *, name: str, expires_days: int | None) -> ApiToken:
    return api.call("POST", "/api/auth/tokens", token_spec(name, expires_days))


def list_tokens(api: ApiClient) -> list[ApiToken]:
    return api.call("GET", "/api/auth/tokens")


def revoke_token(api: ApiClient, token_id: int) -> None:
    api.call("DELETE", f"/api/auth/tokens/{token_id}")


def _when(value: str | None, empty: str) -> str:
    if not value:
        return empty
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone().strftime("%Y-%m-%d %H:%M")


def show_created(created: ApiToken, out: Console, err: Console) -> None:
    say(out, created["token"])
    say(err, f"API token {created['id']} {created['name']!r} for {created.get('username', 'you')}, "
             f"expires {_when(created.get('expiry'), 'never')}: shown this once, keep it "
             "(use it as TORCHYARD_TOKEN or --api-token)")


def token_lines(tokens: list[ApiToken]) -> list[str]:
    """One line per token, the name last (it may be long): a pipe gets whole lines, unwrapped."""
    lines = [f"{'ID':>5}  {'STARTS WITH':<11}  {'CREATED':<16}  {'EXPIRES':<16}  {'LAST USED':<16}  NAME"]
    for t in tokens:
        lines.append(f"{t['id']:>5}  {t['prefix'] + '...':<11}  {_when(t.get('created'), '-'):<16}  "
                     f"{_when(t.get('expiry'), 'never'):<16}  {_when(t.get('last_used'), 'never'):<16}  {t['name']}")
    return lines

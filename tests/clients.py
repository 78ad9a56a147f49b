"""Signed-in clients for the control plane's tests: API tokens as `POST /api/auth/tokens` makes them."""

from __future__ import annotations

from asgiref.sync import async_to_sync
from rest_framework.test import APIClient
from torchyard_server.accounts.services import api_token_create


def token_for(user, name: str = "test") -> str:
    """A new API token of `user` (as `POST /api/auth/tokens` makes one), in clear."""
    return api_token_create(user=user, name=name, expires_in=None)[1]


def signed_in(user) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(user)}")
    return client


def downloaded(response) -> bytes:
    """A file download's body. Downloads stream from a worker thread (an async iterator, as daphne
    serves them), which the test client hands over as is."""

    async def read_all() -> bytes:
        return b"".join([chunk async for chunk in response.streaming_content])

    return async_to_sync(read_all)()

"""Roles as standing fixtures: an owner, a teammate, and an anonymous outsider to be refused."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.core.cache import cache
from rest_framework.test import APIClient
from torchyard_server.accounts.services import api_token_create
from torchyard_server.jobs.models import Job
from torchyard_server.machines.services import machine_create, machine_record_heartbeat


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


@pytest.fixture(autouse=True)
def fresh_sign_in_rates():
    """Sign-in throttling counts in the cache (memory), which outlives a test's transaction:
    every test starts with a clean count, so only a test that means to hits the limit."""
    cache.clear()


@pytest.fixture
def owner(django_user_model):
    return django_user_model.objects.create_user(username="alice", password="pw-alice", is_staff=True)


@pytest.fixture
def teammate(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="pw-bob")


@pytest.fixture
def api(owner) -> APIClient:
    return signed_in(owner)


@pytest.fixture
def anonymous() -> APIClient:
    return APIClient()


@pytest.fixture
def member(django_user_model):
    """A WebSocket's headers for mia, a member of the default project, signed in with an API token."""
    django_user_model.objects.create_user("mia", password="pw-mia")  # joins the default project
    return [(b"authorization", f"Token {token_for(django_user_model.objects.get(username='mia'))}".encode())]


@pytest.fixture
def job(django_user_model, member):
    """A job of mia's in the default project, for stream tests."""
    return Job.objects.create(name="streamed", spec={}, owner=django_user_model.objects.get(username="mia"))


def bring_online(name: str, *, gpus: list[dict] | None = None, cpu_count: int = 4):
    """Register a machine and apply one heartbeat, as its agent's first report would."""
    machine, token = machine_create(name=name, host=f"10.9.0.{abs(hash(name)) % 200 + 1}")
    machine_record_heartbeat(event={
        "machine": machine.pk, "token": token, "agent_version": "test",
        "capabilities": {"cpu_count": cpu_count, "memory": 8 << 30, "disk_space": 100 << 30,
                         "gpu_count": len(gpus or []), "gpu_memory": sum(g["memory_mb"] for g in gpus or []),
                         "gpus": gpus or []},
        "load": {"cpu_usage": 1.0, "memory_usage": 10.0, "gpu_usage": []},
    })
    machine.refresh_from_db()
    return machine, token


@pytest.fixture
def two_machines(db):
    return [bring_online("gpu-a")[0], bring_online("gpu-b")[0]]

"""API tokens: several per user, named, with an optional expiry, hashed at rest, shown once, listed
and revoked by their owner only; the same check on REST and on WebSockets."""

from __future__ import annotations

import hashlib
import json
from datetime import timedelta

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from clients import signed_in, token_for
from django.db import connections
from django.utils import timezone
from rest_framework.test import APIClient
from torchyard_server.accounts.models import ApiToken

pytestmark = pytest.mark.django_db


def with_token(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Token {token}")
    return client


def test_a_user_has_several_named_tokens_and_each_one_works(api):
    laptop = api.post("/api/auth/tokens", {"name": "laptop"}, format="json")
    ci = api.post("/api/auth/tokens", {"name": "CI", "expires_in_days": 30}, format="json")
    assert laptop.status_code == ci.status_code == 201
    assert laptop.json()["name"] == "laptop" and laptop.json()["expiry"] is None
    assert ci.json()["expiry"] is not None
    for created in (laptop.json(), ci.json()):
        assert with_token(created["token"]).get("/api/auth/me").json()["username"] == "alice"
        assert created["token"].startswith(created["prefix"])

    listed = api.get("/api/auth/tokens").json()
    assert {t["name"] for t in listed} >= {"laptop", "CI"}
    assert set(listed[0]) == {"id", "name", "prefix", "created", "expiry", "last_used"}


def test_a_token_is_never_listed_and_is_kept_only_as_a_hash(api, owner):
    created = api.post("/api/auth/tokens", {"name": "laptop"}, format="json").json()
    listing = api.get("/api/auth/tokens").content.decode()
    assert created["token"] not in listing
    row = ApiToken.objects.get(pk=created["id"])
    assert row.digest == hashlib.sha512(created["token"].encode()).hexdigest()
    stored = json.dumps(list(ApiToken.objects.filter(pk=row.pk).values().get().values()), default=str)
    assert created["token"] not in stored


def test_signing_in_with_a_password_gives_a_new_named_token_each_time(anonymous, owner):
    body = {"username": "alice", "password": "pw-alice", "name": "cli on box", "expires_in_days": 7}
    first = anonymous.post("/api/auth/token", body, format="json")
    second = anonymous.post("/api/auth/token", body, format="json")
    assert first.status_code == second.status_code == 200
    answer = first.json()
    assert answer["username"] == "alice" and answer["name"] == "cli on box" and answer["expiry"]
    assert first.json()["token"] != second.json()["token"]
    assert ApiToken.objects.filter(user=owner, name="cli on box").count() == 2
    unnamed = anonymous.post("/api/auth/token", {"username": "alice", "password": "pw-alice"}, format="json")
    assert unnamed.json()["name"] == "API token" and unnamed.json()["expiry"] is None


def test_an_expired_token_is_refused_and_no_longer_listed(api, owner):
    created = api.post("/api/auth/tokens", {"name": "short", "expires_in_days": 1}, format="json").json()
    assert with_token(created["token"]).get("/api/auth/me").status_code == 200
    ApiToken.objects.filter(pk=created["id"]).update(expiry=timezone.now() - timedelta(seconds=1))
    assert with_token(created["token"]).get("/api/auth/me").status_code == 401
    assert created["id"] not in [t["id"] for t in api.get("/api/auth/tokens").json()]


def test_a_revoked_token_stops_working_at_once(api):
    created = api.post("/api/auth/tokens", {"name": "gone soon"}, format="json").json()
    client = with_token(created["token"])
    assert client.get("/api/jobs").status_code == 200
    assert api.delete(f"/api/auth/tokens/{created['id']}").status_code == 204
    assert client.get("/api/jobs").status_code == 401
    assert api.delete(f"/api/auth/tokens/{created['id']}").status_code == 404


def test_a_token_can_revoke_itself(owner):
    key = token_for(owner, "self")
    client = with_token(key)
    mine = next(t for t in client.get("/api/auth/tokens").json() if t["name"] == "self")
    assert client.delete(f"/api/auth/tokens/{mine['id']}").status_code == 204
    assert client.get("/api/auth/me").status_code == 401


def test_someone_elses_tokens_are_invisible_even_to_staff(staff_api, teammate):
    bobs = signed_in(teammate).post("/api/auth/tokens", {"name": "bob's"}, format="json").json()
    assert bobs["id"] not in [t["id"] for t in staff_api.get("/api/auth/tokens").json()]
    assert staff_api.delete(f"/api/auth/tokens/{bobs['id']}").status_code == 404
    assert with_token(bobs["token"]).get("/api/auth/me").json()["username"] == "bob"


def test_a_tokens_last_use_is_recorded(api):
    created = api.post("/api/auth/tokens", {"name": "used"}, format="json").json()
    assert created["last_used"] is None
    with_token(created["token"]).get("/api/auth/me")
    listed = {t["id"]: t for t in api.get("/api/auth/tokens").json()}
    assert listed[created["id"]]["last_used"] is not None


@pytest.mark.parametrize(("body", "field"), [
    ({}, "name"),
    ({"name": ""}, "name"),
    ({"name": "x" * 101}, "name"),
    ({"name": "ok", "expires_in_days": 0}, "expires_in_days"),
    ({"name": "ok", "expires_in_days": "soon"}, "expires_in_days"),
    ({"name": "ok", "expires_in_days": 100_000}, "expires_in_days"),
])
def test_a_bad_token_request_is_a_400_naming_the_field(api, body, field):
    answer = api.post("/api/auth/tokens", body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()


def test_a_garbage_token_is_refused_not_an_error(anonymous):
    for garbage in ("x", "é" * 80, "0" * 64, "Token"):
        assert with_token(garbage).get("/api/auth/me").status_code == 401


# --- WebSockets: the same tokens, the same refusals -------------------------------------------------
async def _cluster_stream(token: str) -> dict:
    """The first frame the cluster stream answers a connection with this token."""
    from torchyard_server.asgi import application

    communicator = WebsocketCommunicator(application, "/api/cluster/stream",
                                         headers=[(b"authorization", f"Token {token}".encode())])
    connected, _ = await communicator.connect()
    assert connected
    try:
        return await communicator.receive_output(timeout=10)
    finally:
        await communicator.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_websocket_accepts_a_live_token_and_refuses_an_expired_or_revoked_one(django_user_model):
    user = await sync_to_async(django_user_model.objects.create_user)("wes", password="pw")
    live = await sync_to_async(token_for)(user, "live")
    expired = await sync_to_async(token_for)(user, "expired")
    revoked = await sync_to_async(token_for)(user, "revoked")
    await ApiToken.objects.filter(name="expired").aupdate(expiry=timezone.now() - timedelta(minutes=1))
    await ApiToken.objects.filter(name="revoked").adelete()

    try:
        first = await _cluster_stream(live)
        assert first["type"] == "websocket.send" and json.loads(first["text"])["type"] == "machines"
        for refused in (expired, revoked, "not-a-token"):
            assert await _cluster_stream(refused) == {"type": "websocket.close", "code": 4401}
    finally:
        # The consumers' database connection lives in asgiref's thread: closed there, or the
        # test database could not be dropped at the end of the session.
        await sync_to_async(connections.close_all)()

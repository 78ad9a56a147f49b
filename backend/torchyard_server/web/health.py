"""`GET /api/health/deep`: the control plane's own dependencies, each tried for real.

`/api/health` only says the web process answers (anonymous, for load balancers and probes). This
one, for staff (it names the database and the store), does one real round trip per dependency:

    database    a query, and no migration left unapplied
    redis       a key set, read back and deleted
    storage     a small file written to the store (TORCHYARD_STORAGE_URL), read back and deleted
    controller  a Celery remote-control ping answered by a worker that is not an agent
    ingest      the event-ingest loop reported within the last INGEST_DOWN_AFTER seconds

It answers 200 when every check passed and 503 when one failed, with every check's result either
way: `torchyard validate` shows them as rows of its table.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from django.conf import settings
from django.core.files.base import ContentFile
from django.db import connection
from django.db.migrations.executor import MigrationExecutor
from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from ..celery import app as celery_app
from ..core.stores import storage_at
from ..projects.permissions import IsStaff
from ..streaming import telemetry
from .metrics import INGEST_DOWN_AFTER, redis_client

PROBE_PREFIX = "health"  # the store's folder for the storage check's short-lived files


class CheckFailed(Exception):
    """A dependency answered, but not as it should (a migration missing, bytes that differ)."""


def check_database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    executor = MigrationExecutor(connection)
    missing = executor.migration_plan(executor.loader.graph.leaf_nodes())
    if missing:
        names = ", ".join(f"{m.app_label}.{m.name}" for m, _ in missing[:3])
        raise CheckFailed(f"{len(missing)} migration(s) not applied ({names}{', ...' if len(missing) > 3 else ''}): "
                          f"run `django-admin migrate`")
    return f"{connection.vendor}: a query answered, every migration applied"


def check_redis() -> str:
    with redis_client(settings.REDIS_URL) as client:
        key, value = f"torchyard:health:{uuid.uuid4().hex}", uuid.uuid4().hex
        client.set(key, value, ex=60)
        read = client.get(key)
        client.delete(key)
        if read != value.encode():
            raise CheckFailed(f"a key set was read back as {read!r}")
        version = client.info("server").get("redis_version", "?")
    return f"Redis {version}: a key set, read back and deleted"


def check_storage() -> str:
    storage = storage_at(settings.STORAGE_URL)
    payload = f"torchyard health check {uuid.uuid4().hex}\n".encode()
    name = storage.save(f"{PROBE_PREFIX}/{uuid.uuid4().hex}.txt", ContentFile(payload))
    try:
        with storage.open(name, "rb") as handle:
            read = handle.read()
    finally:
        storage.delete(name)
    if read != payload:
        raise CheckFailed(f"{len(payload)} bytes written to {settings.STORAGE_URL}, {len(read)} different ones read back")
    return f"{settings.STORAGE_URL}: {len(payload)} bytes written, read back and deleted"


def check_controller() -> str:
    answered: list[str] = []
    # Agents are the only other Celery workers (`agent-<id>@host`); any other one is a controller,
    # whatever its name (`controller@host` under `torchyard-server run`, celery's default in compose).
    celery_app.control.ping(timeout=settings.PING_TIMEOUT, limit=1, matcher="pcre", pattern=r"^(?!agent-)",
                            callback=lambda reply: answered.extend(reply))
    if not answered:
        raise CheckFailed(f"no controller (Celery worker on the control queue) answered a ping within "
                          f"{settings.PING_TIMEOUT:g} s")
    return f"{answered[0]} answered a ping"


def check_ingest() -> str:
    with redis_client(settings.REDIS_URL) as client:
        age = telemetry.ingest_report(client).get("age")
    if age is None:
        raise CheckFailed("the event-ingest loop (`django-admin ingest_events`) never reported")
    if age >= INGEST_DOWN_AFTER:
        raise CheckFailed(f"the event-ingest loop last reported {age:.0f} s ago (it does every second)")
    return f"the event-ingest loop reported {age:.1f} s ago"


CHECKS: list[tuple[str, Callable[[], str]]] = [
    ("database", check_database),
    ("redis", check_redis),
    ("storage", check_storage),
    ("controller", check_controller),
    ("ingest", check_ingest),
]


def run_checks() -> list[dict]:
    results = []
    for name, check in CHECKS:
        started = time.perf_counter()
        try:
            detail, ok = check(), True
        except CheckFailed as exc:
            detail, ok = str(exc), False
        except Exception as exc:  # noqa: BLE001 - whatever a dependency raises is this check's cause
            detail, ok = f"{type(exc).__name__}: {exc}", False
        results.append({"name": name, "ok": ok, "detail": detail,
                        "ms": round((time.perf_counter() - started) * 1000, 1)})
    return results


class DeepHealthCheckOut(serializers.Serializer):
    name = serializers.ChoiceField(choices=[name for name, _ in CHECKS])
    ok = serializers.BooleanField()
    detail = serializers.CharField(help_text="what was done, or why it failed")
    ms = serializers.FloatField(help_text="how long the check took")


class DeepHealthOut(serializers.Serializer):
    status = serializers.ChoiceField(choices=["ok", "failing"])
    checks = DeepHealthCheckOut(many=True)


class DeepHealthView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(responses={200: DeepHealthOut, 503: DeepHealthOut})
    def get(self, request):
        checks = run_checks()
        ok = all(c["ok"] for c in checks)
        return Response({"status": "ok" if ok else "failing", "checks": checks}, status=200 if ok else 503)

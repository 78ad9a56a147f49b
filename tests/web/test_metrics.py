"""GET /metrics: who may scrape it, and that its numbers are the database's and the other processes'
(the ingest loop's entries and lag, the web processes' WebSocket clients) as they are."""

from __future__ import annotations

import json
import time

import pytest
import redis
from channels.testing import WebsocketCommunicator
from clients import signed_in, token_for
from django.conf import settings as django_settings
from factories import bring_online, make_job
from prometheus_client.parser import text_string_to_metric_families
from rest_framework.test import APIClient
from torchyard import protocol
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.models import Machine
from torchyard_server.streaming import telemetry
from torchyard_server.streaming.ingest import Ingest

pytestmark = pytest.mark.django_db(transaction=True)
SCRAPE_TOKEN = "scrape-me-5f1c0d"


@pytest.fixture(autouse=True)
def clean_redis():
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    keys = [telemetry.INGEST_KEY, telemetry.WEBSOCKETS_KEY, protocol.EVENT_STREAM, protocol.LIVENESS_STREAM,
            *client.scan_iter(f"{protocol.EVENT_STREAM}:m*"), *client.scan_iter(f"{protocol.LIVENESS_STREAM}:m*")]
    client.delete(*keys)
    yield client
    client.delete(telemetry.INGEST_KEY, telemetry.WEBSOCKETS_KEY)


@pytest.fixture
def scrape_token(settings):
    settings.METRICS_TOKEN = SCRAPE_TOKEN
    return SCRAPE_TOKEN


def scrape(client: APIClient) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a 200 scrape, by name and labels."""
    response = client.get("/metrics")
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}


def value(samples, name: str, **labels: str) -> float:
    return samples[(name, tuple(sorted(labels.items())))]


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


# --- who may read it -----------------------------------------------------------------------------
def test_without_credentials_it_answers_401_and_asks_for_a_bearer_token(anonymous, scrape_token):
    response = anonymous.get("/metrics")
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_bearer_token_is_refused(scrape_token):
    assert bearer("not-" + scrape_token).get("/metrics").status_code == 401


def test_no_bearer_token_works_while_none_is_configured(settings):
    settings.METRICS_TOKEN = ""
    assert bearer("").get("/metrics").status_code == 401
    assert bearer("anything").get("/metrics").status_code == 401


def test_a_signed_in_user_who_is_not_staff_is_forbidden(teammate, scrape_token):
    assert signed_in(teammate).get("/metrics").status_code == 403


def test_the_scrape_token_and_a_staff_users_api_token_may_read_it(staff_api, scrape_token):
    assert bearer(scrape_token).get("/metrics").status_code == 200
    assert staff_api.get("/metrics").status_code == 200


def test_it_speaks_openmetrics_when_prometheus_asks_for_it(scrape_token):
    response = bearer(scrape_token).get("/metrics", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


def test_it_is_not_in_the_api_schema(api):
    assert "/metrics" not in api.get("/api/schema/", HTTP_ACCEPT="application/json").json()["paths"]


# --- what it says --------------------------------------------------------------------------------
GPU = {"name": "H100", "memory_mb": 81559}


def test_jobs_machines_and_gpus_are_the_databases(staff_api, owner, scrape_token):
    scraper = bearer(scrape_token)
    empty = scrape(scraper)
    assert all(value(empty, "torchyard_jobs", state=s) == 0 for s in Job.Status.values)
    assert all(value(empty, "torchyard_machines", state=s) == 0 for s in Machine.Status.values)

    gpu_box, _ = bring_online("gpu-box", gpus=[{**GPU, "index": i} for i in range(4)])
    bring_online("cpu-box")
    drained, _ = bring_online("drained-box", gpus=[{**GPU, "index": 0}, {**GPU, "index": 1}])
    assert staff_api.patch(f"/api/machines/{drained.pk}", {"status": "draining"}, format="json").status_code == 200
    staff_api.post("/api/machines", {"name": "not-yet", "host": "10.9.9.9"}, format="json")
    submitted = staff_api.post("/api/jobs", {"name": "mlp", "entrypoint": "examples/mlp_ddp.py",
                                       "resources": {"nodes": 1, "procs_per_node": 1}}, format="json")
    assert submitted.status_code == 201, submitted.content
    # A running job holding two of gpu-box's GPUs, and an earlier attempt's node that failed.
    job = make_job(name="on-gpus", owner=owner,
                             status=Job.Status.RUNNING)
    for attempt, status, gpus in ((0, JobNode.Status.FAILED, [0, 1]), (1, JobNode.Status.RUNNING, [2, 3])):
        JobNode.objects.create(job=job, attempt=attempt, machine=gpu_box, machine_name=gpu_box.name, host="h",
                               node_rank=0, nproc=2, rank_start=0, rank_end=1, gpus=gpus, status=status)

    samples = scrape(scraper)
    for status in Job.Status.values:
        assert value(samples, "torchyard_jobs", state=status) == Job.objects.filter(status=status).count()
    assert value(samples, "torchyard_jobs", state="queued") == 1
    assert value(samples, "torchyard_jobs", state="running") == 1
    assert value(samples, "torchyard_machines", state="online") == 2
    assert value(samples, "torchyard_machines", state="draining") == 1
    assert value(samples, "torchyard_machines", state="pending") == 1
    assert value(samples, "torchyard_nodes", state="running") == 1
    assert value(samples, "torchyard_nodes", state="failed") == 1
    assert value(samples, "torchyard_gpus", state="used") == 2
    assert value(samples, "torchyard_gpus", state="free") == 2  # gpu-box's other two
    assert value(samples, "torchyard_gpus", state="unavailable") == 2  # the drained machine's


def test_the_ingest_loops_entries_and_lag_come_from_its_reports(api, scrape_token, clean_redis):
    scraper = bearer(scrape_token)
    before = scrape(scraper)
    assert value(before, "torchyard_ingest_up") == 0  # it never reported
    assert value(before, "torchyard_ingest_entries_total", stream="liveness") == 0

    machine, token = bring_online("beating")
    ingest = Ingest(django_settings.REDIS_URL)
    ingest.telemetry.every = float("inf")  # it reports when told to here, not every second
    ingest.ensure_group()
    for _ in range(3):
        clean_redis.xadd(protocol.machine_liveness_stream(machine.pk), protocol.encode_event({
            "type": protocol.MACHINE_HEARTBEAT, "machine": machine.pk, "token": token, "capabilities": {},
            "load": {"cpu_usage": 5.0}, "running": [], "ts": 0}))
    while ingest.step():
        pass
    assert ingest.telemetry.report(clean_redis, force=True)

    samples = scrape(scraper)
    assert value(samples, "torchyard_ingest_up") == 1
    assert value(samples, "torchyard_ingest_entries_total", stream="liveness") == 3
    assert value(samples, "torchyard_ingest_entries_total", stream="events") == 0
    assert value(samples, "torchyard_ingest_lag_seconds", stream="liveness") > 0
    assert 0 <= value(samples, "torchyard_ingest_report_age_seconds") < 60
    # A later report adds to the counters (they survive the ingest's restarts) and resets the lag.
    restarted = Ingest(django_settings.REDIS_URL)
    restarted.telemetry.every = float("inf")
    restarted.ensure_group()
    clean_redis.xadd(protocol.machine_liveness_stream(machine.pk), protocol.encode_event({
        "type": protocol.MACHINE_HEARTBEAT, "machine": machine.pk, "token": token, "ts": 0}))
    while restarted.step():
        pass
    restarted.telemetry.report(clean_redis, force=True)
    assert value(scrape(scraper), "torchyard_ingest_entries_total", stream="liveness") == 4
    restarted.telemetry.report(clean_redis, force=True)
    assert value(scrape(scraper), "torchyard_ingest_lag_seconds", stream="liveness") == 0


async def test_websocket_clients_are_counted_over_the_web_processes_that_reported(api, owner, scrape_token,
                                                                                   clean_redis):
    from asgiref.sync import sync_to_async
    from torchyard_server.asgi import application

    key = await sync_to_async(token_for)(owner)
    headers = [(b"authorization", f"Token {key}".encode())]
    clients = [WebsocketCommunicator(application, "/api/cluster/stream", headers=headers) for _ in range(2)]
    for client in clients:
        connected, _ = await client.connect()
        assert connected
    # Another web process, alive, with one job stream open; and one that died without a word.
    clean_redis.hset(telemetry.WEBSOCKETS_KEY, mapping={
        "other-host:1": json.dumps({"ts": time.time(), "job": 1, "cluster": 0}),
        "gone-host:2": json.dumps({"ts": 1, "job": 7, "cluster": 7}),
    })
    await telemetry.WEBSOCKETS.report(_aioredis())
    samples = await sync_to_async(scrape)(bearer(scrape_token))
    assert value(samples, "torchyard_websocket_clients", stream="cluster") == 2
    assert value(samples, "torchyard_websocket_clients", stream="job") == 1
    assert not clean_redis.hexists(telemetry.WEBSOCKETS_KEY, "gone-host:2")

    await clients[0].disconnect()
    await telemetry.WEBSOCKETS.report(_aioredis())
    samples = await sync_to_async(scrape)(bearer(scrape_token))
    assert value(samples, "torchyard_websocket_clients", stream="cluster") == 1
    await clients[1].disconnect()


def _aioredis():
    import redis.asyncio as aioredis

    return aioredis.Redis.from_url(django_settings.REDIS_URL)

"""The API keeps to its own OpenAPI schema: Schemathesis sends every operation of the schema that
/api/schema/ serves valid and invalid requests, as a member of the default project, through the
project's WSGI application (in process, on the test database). No answer may be a 5xx, and every
answer must be one the schema lists, of the media type and body shape it gives.

Sample objects (what path parameters name, most of the time, by fixed ids): ada's finished job with
a plan, a node, events, a checkpoint and an artifact, which mia may read but not stop or delete;
mia's own queued job, which she may stop and delete; two online machines (mia may only read them);
mia's bundle. Bounded: a fixed seed and a few examples per operation, each operation on a fresh
copy of these objects."""

from __future__ import annotations

import hashlib
import json

import pytest
import redis
import schemathesis
import yaml
from django.conf import settings as django_settings
from django.core import signals
from django.core.wsgi import get_wsgi_application
from django.db import close_old_connections
from django.test import Client
from django.utils import timezone
from drf_spectacular.generators import SchemaGenerator
from factories import bring_online
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from torchyard import protocol
from torchyard_server.artifacts.models import Artifact
from torchyard_server.bundles.models import Bundle
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.control.dispatch import job_preview_plan
from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.machines.models import Machine
from torchyard_server.streaming.models import JobEvent

pytestmark = [
    pytest.mark.django_db,
    # The log stream is an async iterator, which a WSGI server (this one) reads synchronously.
    pytest.mark.filterwarnings("ignore:StreamingHttpResponse must consume asynchronous iterators"),
]

CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
SPEC = {"name": "fuzzed", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "4"],
        "resources": {"nodes": 2, "procs_per_node": 1}, "hyperparameters": {"batch_size": 8, "lr": 0.01}}
PASSWORD = "pw-mia-fuzz"
# Fixed ids, far above what the sequences hand out here, so the schema's path parameters can name them.
THEIR_JOB, MY_JOB, CHECKPOINT, ARTIFACT = 900_001, 900_002, 900_003, 900_004
MACHINES = (900_011, 900_012)
BUNDLE = "a" * 64
SAMPLES = {
    "job_id": [THEIR_JOB, MY_JOB], "machine_id": list(MACHINES), "checkpoint_id": [CHECKPOINT],
    "artifact_id": [ARTIFACT], "path": ["w.bin"], "key": ["model.txt"], "sha256": [BUNDLE],
    "name": ["default", "gpu-a"], "username": ["mia", "ada"],
}


def served_schema() -> dict:
    """What /api/schema/ serves (the test below holds that it is the same)."""
    return json.loads(json.dumps(SchemaGenerator().get_schema(request=None, public=True), default=str))


schema = schemathesis.openapi.from_dict(served_schema(), config=schemathesis.Config.from_dict({
    # Path parameters name the sample objects nine times in ten; otherwise whatever Hypothesis draws.
    "dictionaries": {name: {"values": values} for name, values in SAMPLES.items()},
    "parameters": {f"path.{name}": {"dictionary": name, "probability": 0.9} for name in SAMPLES},
    # The budget: a fixed seed and ten valid and ten invalid requests per operation, besides the
    # schema's own examples. (The coverage phase, every boundary of every field, would send a
    # JobSpec route five hundred.)
    "generation": {"deterministic": True, "max-examples": 10, "database": "none"},
    "phases": {"coverage": {"enabled": False}},
    # The log stream follows a live job until it ends: ask it about the finished one only.
    "operations": [{"include-path": "/api/jobs/{job_id}/logs/stream", "parameters": {"path.job_id": THEIR_JOB}}],
}))


def _validated(spec: dict) -> dict:
    serializer = JobSpecSerializer(data=spec)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


@pytest.fixture
def world(settings, tmp_path, django_user_model):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    settings.PING_TIMEOUT = 0.1  # no agent answers here: a ping waits this long for nothing
    ada = django_user_model.objects.create_user("ada", password="pw-ada")
    mia = django_user_model.objects.create_user("mia", password=PASSWORD)  # both join the default project
    machines = []
    for pk, name in zip(MACHINES, ("gpu-a", "gpu-b"), strict=True):
        machine = bring_online(name)[0]
        Machine.objects.filter(pk=machine.pk).update(id=pk)
        machines.append(Machine.objects.get(pk=pk))
    spec = _validated(SPEC)
    plan = job_preview_plan(spec=JobSpec.from_json(spec)).to_json()
    theirs = Job.objects.create(pk=THEIR_JOB, name="ada's", spec=spec, plan=plan, owner=ada,
                                status=Job.Status.COMPLETED, world_size=2, started_at=timezone.now(),
                                finished_at=timezone.now())
    node = JobNode.objects.create(job=theirs, attempt=0, machine=machines[0], machine_name="gpu-a", host="10.0.0.1",
                                  node_rank=0, nproc=1, rank_start=0, rank_end=0, status=JobNode.Status.COMPLETED)
    for seq, (kind, payload) in enumerate([("log", {"line": "hello", "stream": "stdout"}),
                                           ("metric", {"step": 1, "loss": 0.5}),
                                           ("metric", {"step": 2, "loss": 0.25})], start=1):
        JobEvent.objects.create(job=theirs, node=node, node_rank=0, rank=0, type=kind, ts=timezone.now(),
                                payload=payload, dedupe_key=f"n{node.pk}:{seq}")
    Job.objects.create(pk=MY_JOB, name="mia's", spec=spec, owner=mia, status=Job.Status.QUEUED)

    step = tmp_path / "store" / f"job-{THEIR_JOB}" / "checkpoints" / "step-2"
    step.mkdir(parents=True)
    (step / "w.bin").write_bytes(b"w" * 8)
    files = [{"path": "w.bin", "size": 8, "sha256": hashlib.sha256(b"w" * 8).hexdigest()}]
    (step / "manifest.json").write_text(json.dumps({"step": 2, "files": files}))
    CheckpointManifest.objects.create(pk=CHECKPOINT, job=theirs, step=2, uri=(step / "manifest.json").as_uri(),
                                      files=files, committed_at=timezone.now())
    out = tmp_path / "store" / f"job-{THEIR_JOB}" / "artifacts" / "attempt-0" / "node-0"
    out.mkdir(parents=True)
    (out / "model.txt").write_bytes(b"m\n")
    Artifact.objects.create(pk=ARTIFACT, job=theirs, attempt=0, node_rank=0, path="model.txt", size=2,
                            sha256=hashlib.sha256(b"m\n").hexdigest(), uri=(out / "model.txt").as_uri())
    Bundle.objects.create(sha256=BUNDLE, size=1, unpacked_size=1).owners.add(mia)
    yield
    # What the fuzz asked agents to do (prepare_dependencies) waits in their queues: no agent reads them.
    redis.Redis.from_url(django_settings.CELERY_BROKER_URL).delete(*[protocol.machine_queue(pk) for pk in MACHINES])


@pytest.fixture
def member(world) -> dict[str, str]:
    """Mia's headers: a token she got as any script would."""
    response = Client().post("/api/auth/token", {"username": "mia", "password": PASSWORD}, content_type="application/json")
    assert response.status_code == 200, response.content
    return {"Authorization": f"Token {response.json()['token']}"}


@pytest.fixture
def app():
    """The project's WSGI application, run as Django's test client runs it: a request must not close
    the database connection that holds the test's transaction."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield get_wsgi_application()
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


def test_the_fuzzed_schema_is_the_one_served(member):
    response = Client().get("/api/schema/", headers=member)
    assert response.status_code == 200
    assert yaml.safe_load(response.content) == served_schema()


@schema.parametrize()
@settings(deadline=None, suppress_health_check=list(HealthCheck))
def test_every_answer_keeps_to_the_schema(case, member, app):
    case.call_and_validate(app=app, headers=member, checks=CHECKS)

"""One assertion per route, method and role, generated from the URL configuration: a route under
/api/ that is not listed in POLICY fails the suite, and so does one whose view lets a role do more
(or less) than its policy says. The rules themselves live in torchyard_server.projects.permissions.

The cast is the shared one (tests/conftest.py), moved out of the default project: project `lab`
(admin alice, member bob, viewer vic) holds the job every job route is asked about, owned by alice
(so bob, a member, may see it but not stop it); the outsider carol is a member of project `other`
only; sam is staff."""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Callable

import pytest
from clients import token_for
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from rest_framework.test import APIClient
from torchyard_server.accounts.services import api_token_create
from torchyard_server.artifacts.services import artifacts_record, function_result_record
from torchyard_server.bundles.models import Bundle
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.intake.serializer import JobSpecSerializer
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.machines.services import machine_create, machine_delete
from torchyard_server.plugins.models import Plugin
from torchyard_server.projects.models import Membership, Project
from torchyard_server.sweeps.models import Sweep
from torchyard_server.templates.models import JobTemplate

pytestmark = pytest.mark.django_db

ROLES = ["staff", "admin", "member", "viewer", "outsider", "anonymous", "machine", "revoked_machine"]
USERS = ["staff", "admin", "member", "viewer", "outsider"]

# Expectations: what each role gets.
OK, DENIED, HIDDEN, UNAUTH, BAD = "ok", "403", "404", "unauthenticated", "400"
ADMITTED = "admitted"  # past authentication; the object may still be none of its business (404)
CHECKED = "checked"  # a health check's answer: 200 when every check passed, 503 naming the one that failed


def everyone_signed_in(role: str) -> str:
    return OK if role in USERS else UNAUTH


def staff_only(role: str) -> str:
    return OK if role == "staff" else DENIED if role in USERS else UNAUTH


def staff_health(role: str) -> str:
    return CHECKED if role == "staff" else DENIED if role in USERS else UNAUTH


def job_read(role: str) -> str:
    return OK if role in ("staff", "admin", "member", "viewer") else HIDDEN if role == "outsider" else UNAUTH


def job_control(role: str) -> str:
    # The job is alice's: bob (a member) may stop only his own.
    return {"staff": OK, "admin": OK, "member": DENIED, "viewer": DENIED, "outsider": HIDDEN}.get(role, UNAUTH)


def submit(role: str) -> str:
    # Into project lab: a viewer is refused (403), an outsider does not see lab at all (400).
    return {"staff": OK, "admin": OK, "member": OK, "viewer": DENIED, "outsider": BAD}.get(role, UNAUTH)


def submits_somewhere(role: str) -> str:
    return DENIED if role == "viewer" else everyone_signed_in(role)


def task_submit(role: str) -> str:
    # A task (job template) of project lab: its members submit it, a viewer may not, the outsider does not see it.
    return {"staff": OK, "admin": OK, "member": OK, "viewer": DENIED, "outsider": HIDDEN}.get(role, UNAUTH)


def project_read(role: str) -> str:
    return job_read(role)


def project_admin(role: str) -> str:
    return {"staff": OK, "admin": OK, "member": DENIED, "viewer": DENIED, "outsider": HIDDEN}.get(role, UNAUTH)


def public(role: str) -> str:
    return OK


def purge(role: str) -> str:
    # Staff, or a project's admin (alice); the others admin no project.
    return {"staff": OK, "admin": OK}.get(role, DENIED if role in USERS else UNAUTH)


def own_token(role: str) -> str:
    # The token asked about is sam's (staff): anyone else's API tokens are invisible, even to staff.
    return OK if role == "staff" else HIDDEN if role in USERS else UNAUTH


def agent(role: str) -> str:
    # A machine token only; a user's token or a removed machine's is refused.
    return ADMITTED if role == "machine" else UNAUTH


def live_jobs_only(role: str) -> str:
    # The Ray dashboard of a live Ray job: the lab job has ended, so every reader is told 404 too.
    return HIDDEN if role in USERS else UNAUTH


READ_WRITE_STAFF = {"get": everyone_signed_in, "post": staff_only, "patch": staff_only, "delete": staff_only}

POLICY: dict[str, dict[str, Callable[[str], str]] | Callable[[str], str]] = {
    "api/health": public,
    "api/health/deep": staff_health,  # the server's own round trips (database, Redis, storage, controller, ingest)
    "api/schema/": everyone_signed_in,
    "api/docs/": everyone_signed_in,
    "api/auth/csrf": public,
    "api/auth/login": public,
    "api/auth/logout": public,
    "api/auth/me": everyone_signed_in,
    "api/auth/token": public,
    "api/auth/tokens": everyone_signed_in,
    "api/auth/tokens/<int:token_id>": own_token,
    "api/audit": staff_only,
    "api/agent/config": agent,
    "api/agent/health": agent,
    "api/agent/bundles/<str:sha256>": agent,
    "api/bundles": everyone_signed_in,
    "api/bundles/limits": everyone_signed_in,
    "api/bundles/<str:sha256>": everyone_signed_in,  # per uploader: someone else's bundle is a 404
    "api/machines": READ_WRITE_STAFF,
    "api/machines/<int:machine_id>": READ_WRITE_STAFF,
    "api/machines/<int:machine_id>/rotate-token": staff_only,
    "api/preferences/distributed": everyone_signed_in,  # each user's own, never anyone else's
    "api/projects": {"get": everyone_signed_in, "post": staff_only},
    "api/projects/<str:name>": {"get": project_read, "patch": project_admin},
    "api/projects/<str:name>/members": {"get": project_read, "post": project_admin},
    "api/projects/<str:name>/members/<str:username>": project_admin,
    "api/recipes": everyone_signed_in,
    "api/plugins": {"get": everyone_signed_in, "post": submit},
    "api/plugins/<str:project>/<str:name>": {"get": job_read, "delete": job_control},
    "api/placement-policies": everyone_signed_in,
    "api/cluster/workers": everyone_signed_in,
    "api/cluster/resources": everyone_signed_in,
    "api/sweeps": {"get": everyone_signed_in, "post": submit},  # each user's visible sweeps only
    # The sweep is alice's, in lab: bob (a member) may see it but not stop or resume it.
    "api/sweeps/<int:sweep_id>": job_read,
    "api/sweeps/<int:sweep_id>/stop": job_control,
    "api/sweeps/<int:sweep_id>/resume": job_control,
    "api/experiments": everyone_signed_in,  # runs of each user's visible jobs only
    "api/experiments/compare": job_read,  # compares a run of the lab job: hidden from the outsider
    "api/experiments/<str:run_id>": job_read,
    "api/jobs": {"get": everyone_signed_in, "post": submit},
    "api/queue": everyone_signed_in,  # the jobs of each user's projects only, each with its place in the whole queue
    "api/usage": everyone_signed_in,  # the usage of each user's projects only
    "api/usage/goodput": everyone_signed_in,  # the goodput of each user's projects' jobs only
    "api/jobs/plan": submit,
    "api/jobs/summaries": everyone_signed_in,  # each user's visible jobs only
    "api/jobs/purge": purge,
    "api/jobs/<int:job_id>": {"get": job_read, "patch": job_control, "delete": job_control},
    "api/jobs/<int:job_id>/stop": job_control,
    # Reading where the ranks are is reading the job (its world's job has ended: a 409 says so).
    "api/jobs/<int:job_id>/stacks": job_read,
    "api/jobs/<int:job_id>/summary": job_read,
    "api/jobs/<int:job_id>/goodput": job_read,
    "api/jobs/<int:job_id>/logs": job_read,
    "api/jobs/<int:job_id>/logs/stream": job_read,
    "api/jobs/<int:job_id>/metrics": job_read,
    "api/jobs/<int:job_id>/events": job_read,
    "api/jobs/<int:job_id>/checkpoints": job_read,
    "api/jobs/<int:job_id>/artifacts": job_read,
    "api/jobs/<int:job_id>/artifacts/archive": job_read,
    "api/jobs/<int:job_id>/artifacts/<int:artifact_id>": job_read,
    "api/jobs/<int:job_id>/results": job_read,
    "api/jobs/<int:job_id>/results/<int:rank>": job_read,
    "api/jobs/<int:job_id>/ray/": live_jobs_only,
    "api/jobs/<int:job_id>/ray/<path:path>": live_jobs_only,
    "api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>": job_read,
    "api/jobs/<int:job_id>/checkpoints/<int:checkpoint_id>/files/<path:path>": job_read,
    "api/network/machines": READ_WRITE_STAFF,
    "api/network/machines/by-name/<str:name>": staff_only,
    "api/network/machines/<int:machine_id>": READ_WRITE_STAFF,
    "api/network/machines/<int:machine_id>/ping": everyone_signed_in,
    "api/network/machines/<int:machine_id>/dispatch_job": submit,
    "api/network/status": everyone_signed_in,
    "api/network/health-check": everyone_signed_in,
    "api/network/capabilities": everyone_signed_in,
    "api/network/distributed/plan": submit,
    "api/network/distributed/dispatch": submit,
    "api/network/distributed/status/<str:job_id>": job_read,
    "api/network/distributed/stop/<str:job_id>": job_control,
    "api/network/distributed_jobs/plan": submit,
    "api/network/distributed_jobs/dispatch": submit,
    "api/network/distributed_jobs/<str:job_id>/status": job_read,
    "api/network/machines/<int:machine_id>/job_status/<str:job_id>": job_read,
    "api/network/machines/<int:machine_id>/stop_job/<str:job_id>": job_control,
    "api/network/execute_job": submit,
    "api/network/local_job_status/<str:job_id>": job_read,
    "api/network/prepare_dependencies": submits_somewhere,
    "api/network/local_job_output/<str:job_id>": job_read,
    "api/network/local_job_file/<str:job_id>/<path:key>": job_read,
    "api/tasks/distributed/suggest_machines": everyone_signed_in,
    "api/tasks": {"get": everyone_signed_in, "post": submit},
    # The task is alice's: bob (a member) may submit it but not change it.
    "api/tasks/<int:task_id>": {"get": job_read, "put": job_control, "delete": job_control},
    "api/tasks/<int:task_id>/queue_distributed": task_submit,
    "api/tasks/plan-<int:task_id>/queue_distributed": task_submit,
    "api/tasks/<int:task_id>/queue/<int:machine_id>": task_submit,
}

SPEC = {"name": "m", "project": "lab", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "2"],
        "distributed": {"backend": "gloo"}}
SWEEP = {"name": "s", "project": "lab", "trial": {"entrypoint": "examples/mlp_ddp.py"},
         "space": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}}, "searcher": {"metric": "loss", "max_trials": 2}}
BODIES = {
    "api/agent/health": {"ok": True, "checks": []},
    "api/sweeps": SWEEP,
    "api/jobs": SPEC,
    "api/jobs/plan": SPEC,
    "api/network/machines/<int:machine_id>/dispatch_job": SPEC,
    "api/network/distributed/plan": {"plugin_name": "mlp_ddp", "project": "lab", "resource_requirements": {"num_machines": 1}},
    "api/network/distributed/dispatch": {"plugin_name": "mlp_ddp", "project": "lab", "resource_requirements": {"num_machines": 1}},
    "api/network/prepare_dependencies": {"pip": ["six"]},
    "api/network/distributed_jobs/plan": {"plugin_name": "mlp_ddp", "project": "lab", "resource_requirements": {"num_machines": 1}},
    "api/network/distributed_jobs/dispatch": {"plugin_name": "mlp_ddp", "project": "lab", "resource_requirements": {"num_machines": 1}},
    "api/network/execute_job": {"job_data": SPEC},
    "api/tasks": {"plugin_name": "mlp_ddp", "project": "lab"},
    "api/plugins": {"name": "matrix_plugin", "bundle": "a" * 64, "project": "lab"},
    "api/tasks/<int:task_id>": {"plugin_name": "mlp_ddp", "project": "lab", "config": {"lr": 0.1}},
    "api/projects": {"name": "new-one"},
    "api/projects/<str:name>": {"description": "the lab's"},
    "api/jobs/<int:job_id>": {"priority": "low"},
    "api/projects/<str:name>/members": {"username": "carol", "role": "viewer"},
    "api/projects/<str:name>/members/<str:username>": {"role": "admin"},
    "api/machines": {"name": "new-machine", "host": "10.0.0.9"},
    "api/machines/<int:machine_id>": {"status": "draining"},
    "api/network/machines/<int:machine_id>": {"status": "draining"},
    "api/auth/login": {"username": "nobody", "password": "x"},
    "api/auth/token": {"username": "nobody", "password": "x"},
    "api/auth/tokens": {"name": "matrix"},
    "api/jobs/purge": {"older_than_days": 0, "dry_run": True},
    "api/experiments/compare": lambda world: {"runs": [f"{world['job'].pk}.0"]},
    "api/preferences/distributed": lambda world: {
        "preferred_machines": [world["machine"].pk], "default_num_machines": 2, "default_procs_per_machine": 1,
        "default_gpus_per_machine": 0, "auto_machine_selection": False},
}


def api_routes() -> list[tuple[str, str, type]]:
    """(route, method, view class) for every /api/ route of the URL configuration."""
    found = []

    def walk(patterns, prefix=""):
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                route = prefix + str(p.pattern)
                if not route.startswith("api/"):
                    continue
                view = getattr(p.callback, "view_class", None) or getattr(p.callback, "cls", None)
                methods = [m for m in ("get", "post", "put", "patch", "delete") if view is None or hasattr(view, m)]
                found.extend((route, m, view) for m in methods)

    walk(get_resolver().url_patterns)
    return found


ROUTES = api_routes()


def test_every_api_route_has_a_policy():
    unlisted = sorted({route for route, _, _ in ROUTES} - set(POLICY))
    assert not unlisted, f"routes without a permission policy in this test (add one): {unlisted}"


@pytest.fixture
def world(settings, tmp_path, staff, owner, teammate, viewer, outsider):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    users = {"staff": staff, "admin": owner, "member": teammate, "viewer": viewer, "outsider": outsider}
    Membership.objects.filter(project__name="default").delete()
    lab, other = Project.objects.create(name="lab"), Project.objects.create(name="other")
    for role in ("admin", "member", "viewer"):
        Membership.objects.create(project=lab, user=users[role], role=role)
    Membership.objects.create(project=other, user=users["outsider"], role="member")

    machine, token = machine_create(name="gpu-a", host="10.0.0.1")
    gone, revoked = machine_create(name="gone", host="10.0.0.2")
    machine_delete(machine=gone)
    # A function job (torchyard.fn), so its results answer too.
    job = Job.objects.create(name="labs", spec={"function": {"name": "train"}}, owner=users["admin"], project=lab,
                             status=Job.Status.COMPLETED)

    root = tmp_path / "store" / f"job-{job.pk}"
    (root / "checkpoints" / "step-1").mkdir(parents=True)
    weights = b"w" * 8
    (root / "checkpoints" / "step-1" / "w.bin").write_bytes(weights)
    files = [{"path": "w.bin", "size": 8, "sha256": hashlib.sha256(weights).hexdigest()}]
    (root / "checkpoints" / "step-1" / "manifest.json").write_text(json.dumps({"files": files}))
    checkpoint = CheckpointManifest.objects.create(
        job=job, step=1, uri=(root / "checkpoints" / "step-1" / "manifest.json").as_uri(), files=files,
        committed_at=timezone.now())
    out = root / "artifacts" / "attempt-0" / "node-0"
    out.mkdir(parents=True)
    (out / "model.txt").write_bytes(b"m\n")
    artifacts_record(event={"job": job.pk, "attempt": 0, "node_rank": 0, "files": [
        {"path": "model.txt", "size": 2, "sha256": hashlib.sha256(b"m\n").hexdigest(), "uri": (out / "model.txt").as_uri()}]})
    result = root / "results" / "attempt-0" / "rank-0.pkl"
    result.parent.mkdir(parents=True)
    result.write_bytes(b"pickled")
    function_result_record(event={"job": job.pk, "attempt": 0, "node_rank": 0, "rank": 0, "ok": True, "size": 7,
                                  "sha256": "", "uri": result.as_uri(), "repr": "1"})
    # The job ran on gpu-a (the seed's machine/job routes ask about that pair); a task of lab is alice's.
    JobNode.objects.create(job=job, attempt=0, machine=machine, machine_name="gpu-a", host="10.0.0.1", node_rank=0,
                           nproc=1, rank_start=0, rank_end=0, status=JobNode.Status.COMPLETED)
    saved = JobSpecSerializer(data=SPEC)
    saved.is_valid(raise_exception=True)
    template = JobTemplate.objects.create(name="labs", spec=saved.validated_data, owner=users["admin"], project=lab)
    bundle = Bundle.objects.create(sha256="a" * 64, size=1, unpacked_size=1)
    bundle.owners.set(users.values())  # bundles stay per uploader: every user here uploaded this one
    Plugin.objects.create(name="lab", project=lab, version="1", entrypoint="main.py", bundle=bundle, owner=users["admin"])
    api_token, _ = api_token_create(user=users["staff"], name="sam's laptop", expires_in=None)
    # A stopped sweep of lab, alice's (its searcher's study is made when it first moves on).
    searcher = {"name": "tpe", "metric": "loss", "mode": "min", "max_trials": 2, "max_concurrent": 1, "max_failures": 0}
    sweep = Sweep.objects.create(name="labs", project=lab, owner=users["admin"], status=Sweep.Status.STOPPED,
                                 study_name=f"matrix-{uuid.uuid4().hex}",
                                 spec={"name": "labs", "project": "lab", "trial": SPEC, "searcher": searcher,
                                       "space": {"lr": {"loguniform": [1.0e-4, 1.0e-1]}}})
    return {"users": users, "job": job, "api_token": api_token, "machine": machine, "token": token, "revoked": revoked,
            "checkpoint": checkpoint, "artifact": job.artifacts.get(), "bundle": bundle,
            "template": template, "sweep": sweep}


def client_for(role: str, world) -> APIClient:
    client = APIClient()
    if role in USERS:
        client.credentials(HTTP_AUTHORIZATION=f"Token {token_for(world['users'][role])}")
    elif role == "machine":
        client.credentials(HTTP_AUTHORIZATION=f"Machine {world['token']}")
    elif role == "revoked_machine":
        client.credentials(HTTP_AUTHORIZATION=f"Machine {world['revoked']}")
    return client


def url_for(route: str, world) -> str:
    values = {
        "job_id": world["job"].pk, "machine_id": world["machine"].pk, "checkpoint_id": world["checkpoint"].pk,
        "artifact_id": world["artifact"].pk, "path": "w.bin", "key": "model.txt", "sha256": "a" * 64,
        "name": "gpu-a" if "by-name" in route else "lab", "username": world["users"]["viewer"].username,
        "project": "lab",
        "token_id": world["api_token"].pk, "task_id": world["template"].pk, "run_id": f"{world['job'].pk}.0",
        "rank": 0, "sweep_id": world["sweep"].pk,
    }
    url = route
    for conv in ("int", "str", "path"):
        for name, value in values.items():
            url = url.replace(f"<{conv}:{name}>", str(value))
    assert "<" not in url, f"no sample value for {url}"
    return "/" + url


def expected(route: str, method: str, role: str) -> str:
    policy = POLICY[route]
    rule = policy[method] if isinstance(policy, dict) else policy
    return rule(role)


CASES = [(route, method, role) for route, method, _ in ROUTES if route in POLICY for role in ROLES]


@pytest.mark.parametrize(("route", "method", "role"), CASES, ids=[f"{m.upper()} /{r} as {o}" for r, m, o in CASES])
def test_each_role_gets_what_the_policy_says(world, monkeypatch, route, method, role):
    from torchyard_server.celery import app as celery_app

    monkeypatch.setattr(celery_app.control, "ping", lambda timeout=1.0, **kwargs: [])
    monkeypatch.setattr(celery_app, "send_task", lambda *a, **k: None)
    client = client_for(role, world)
    body = BODIES.get(route) if method in ("post", "put", "patch") else None
    if callable(body):  # a body naming the world's objects
        body = body(world)
    response = getattr(client, method)(url_for(route, world), body, format="json", HTTP_ACCEPT="*/*")
    want = expected(route, method, role)
    got = response.status_code
    detail = f"{method.upper()} {url_for(route, world)} as {role}: {got} {getattr(response, 'content', b'')[:300]!r}"
    if want == OK:
        assert got < 500 and got not in (401, 403, 404), detail
    elif want == ADMITTED:
        assert got < 500 and got not in (401, 403), detail
    elif want == CHECKED:
        assert got in (200, 503), detail
    elif want == UNAUTH:
        assert got in (401, 403), detail
    else:
        assert got == int(want), detail

"""The audit log: every action through the real API leaves one entry (who, what, when, from where),
a refused one leaves none, and only staff read it (GET /api/audit, the admin). Also the cluster
view's per-project usage: everyone sees which project takes a machine's GPUs, no one sees jobs of
projects they are not in."""

from __future__ import annotations

import hashlib
import io
import tarfile
from datetime import timedelta

import pytest
import zstandard
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.db import connections
from django.test import Client
from django.utils import timezone
from factories import bring_online, make_job
from rest_framework.test import APIClient
from torchyard_server.audit.models import AuditEntry
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.live.consumers import ClusterStreamConsumer
from torchyard_server.machines.services import machine_create
from torchyard_server.projects.models import Membership, Project

pytestmark = pytest.mark.django_db

SPEC = {"name": "vit", "project": "vision", "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", "2"],
        "distributed": {"backend": "gloo"}}


def client_of(user) -> APIClient:
    """Signed in as the dashboard is, with a session (the staff `api` fixture uses a token)."""
    client = APIClient()
    client.force_login(user)
    return client


@pytest.fixture
def team(db, django_user_model, staff):
    """Project `vision`: ada its admin, mia a member, vic a viewer; oz only views `nlp`."""
    users = {name: django_user_model.objects.create_user(name) for name in ("ada", "mia", "vic", "oz")}
    vision, nlp = Project.objects.create(name="vision"), Project.objects.create(name="nlp")
    for name, role in (("ada", "admin"), ("mia", "member"), ("vic", "viewer")):
        Membership.objects.create(project=vision, user=users[name], role=role)
    Membership.objects.create(project=nlp, user=users["oz"], role="viewer")
    return {**users, "staff": staff, "vision": vision, "nlp": nlp}


def entries(**filters) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(**filters).order_by("id"))


def log(api: APIClient, query: str = "") -> list[dict]:
    response = api.get(f"/api/audit{query}")
    assert response.status_code == 200, response.content
    return response.json()["results"]


# --- what is recorded ------------------------------------------------------------------------------
def test_submitting_stopping_and_deleting_a_job_are_recorded_with_who_and_from_where(staff_api, team, two_machines):
    mia = client_of(team["mia"])
    job_id = mia.post("/api/jobs", SPEC, format="json", REMOTE_ADDR="10.1.2.3").json()["id"]
    assert mia.post(f"/api/jobs/{job_id}/stop").status_code == 202
    assert mia.delete(f"/api/jobs/{job_id}").status_code == 204

    listed = log(staff_api, f"?target_type=job&target_id={job_id}")
    assert [e["action"] for e in listed] == ["job.delete", "job.stop", "job.submit"]  # newest first
    submit = listed[-1]
    assert submit["actor"] == "mia" and submit["actor_id"] == team["mia"].pk
    assert submit["project"] == "vision" and submit["target_label"] == f"#{job_id} vit"
    assert submit["source_ip"] == "10.1.2.3"
    assert submit["detail"]["resources"]["nodes"] == 1
    assert listed[1]["detail"] == {"previous": "queued", "reason": "stopped by mia"}
    assert listed[0]["detail"] == {"status": "stopped"}


def test_deleting_a_live_job_is_recorded_as_its_stop(api, team, two_machines):
    ada = client_of(team["ada"])
    job_id = ada.post("/api/jobs", SPEC, format="json").json()["id"]
    assert ada.delete(f"/api/jobs/{job_id}").status_code == 202
    stop = entries(action="job.stop", target_id=str(job_id))
    assert len(stop) == 1 and stop[0].detail["reason"] == "cancelled by ada"


def test_machine_changes_are_recorded_one_entry_per_action(staff_api):
    added = staff_api.post("/api/machines", {"name": "box", "host": "10.0.0.5", "labels": {"rack": "a"}}, format="json")
    machine_id = added.json()["id"]
    assert staff_api.patch(f"/api/machines/{machine_id}", {"status": "draining"}, format="json").status_code == 200
    assert staff_api.patch(f"/api/machines/{machine_id}", {"status": "online", "port": 9000}, format="json").status_code == 200
    assert staff_api.post(f"/api/machines/{machine_id}/rotate-token").status_code == 200
    assert staff_api.delete(f"/api/machines/{machine_id}").status_code == 204

    trail = entries(target_type="machine", target_id=str(machine_id))
    assert [e.action for e in trail] == [
        "machine.add", "machine.drain", "machine.undrain", "machine.update", "machine.rotate_token", "machine.remove"]
    assert {e.actor_label for e in trail} == {"sam"} and {e.target_label for e in trail} == {"box"}
    assert trail[0].detail == {"host": "10.0.0.5", "port": 8001, "labels": {"rack": "a"}}
    assert trail[3].detail == {"changed": {"port": {"from": 8001, "to": 9000}}}
    assert trail[-1].detail == {"force": False}
    assert not any("token" in str(e.detail) for e in trail)  # the log never holds a secret


def test_creating_and_revoking_api_tokens_are_recorded_without_the_token(team):
    mia = client_of(team["mia"])
    created = mia.post("/api/auth/tokens", {"name": "laptop", "expires_in_days": 7}, format="json")
    assert created.status_code == 201, created.content
    token_id, key = created.json()["id"], created.json()["token"]
    assert mia.delete(f"/api/auth/tokens/{token_id}").status_code == 204
    assert client_of(team["vic"]).delete(f"/api/auth/tokens/{token_id}").status_code == 404  # records nothing

    trail = entries(target_type="token", target_id=str(token_id))
    assert [e.action for e in trail] == ["token.create", "token.revoke"]
    assert {e.actor_label for e in trail} == {"mia"} and {e.target_label for e in trail} == {"laptop"}
    assert trail[0].detail["owner"] == "mia" and trail[0].detail["expiry"]
    assert not any(key in str(e.detail) + e.target_label for e in trail)


def test_project_and_member_changes_are_recorded_in_the_project(staff_api, team):
    ada = client_of(team["ada"])
    assert staff_api.post("/api/projects", {"name": "audio"}, format="json").status_code == 201
    assert ada.post("/api/projects/vision/members", {"username": "oz", "role": "viewer"}, format="json").status_code == 201
    assert ada.patch("/api/projects/vision/members/oz", {"role": "member"}, format="json").status_code == 200
    assert ada.patch("/api/projects/vision/members/oz", {"role": "member"}, format="json").status_code == 200
    assert ada.delete("/api/projects/vision/members/oz").status_code == 204

    created = entries(action="project.create")
    assert [(e.actor_label, e.target_label, e.project.name) for e in created] == [("sam", "audio", "audio")]
    members = entries(project__name="vision")
    assert [(e.action, e.actor_label, e.target_type, e.target_label, e.detail) for e in members] == [
        ("project.member_add", "ada", "user", "oz", {"role": "viewer"}),
        ("project.member_role_change", "ada", "user", "oz", {"role": "member", "previous": "viewer"}),
        # Setting the role it already has changes nothing, and records nothing.
        ("project.member_remove", "ada", "user", "oz", {}),
    ]


def test_the_seeds_aliases_are_recorded_like_the_canonical_routes(staff_api, team, two_machines):
    mia = client_of(team["mia"])
    plan = {"plugin_name": "mlp_ddp", "project": "vision", "resource_requirements": {"num_machines": 1}}
    job_id = mia.post("/api/network/distributed/dispatch", plan, format="json").json()["job_id"]
    assert mia.post(f"/api/network/distributed/stop/{job_id}").status_code == 200
    assert staff_api.delete(f"/api/network/machines/by-name/{two_machines[0].name}").status_code == 200

    assert [(e.action, e.actor_label) for e in entries(target_type="job", target_id=str(job_id))] == [
        ("job.submit", "mia"), ("job.stop", "mia")]
    assert [e.actor_label for e in entries(action="machine.remove", target_label=two_machines[0].name)] == ["sam"]


def test_uploading_a_bundle_is_recorded_each_time_someone_uploads_it(api, team, settings, tmp_path):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = 3
        tar.addfile(info, io.BytesIO(b"1\n\n"))
    body = zstandard.ZstdCompressor().compress(raw.getvalue())
    sha256 = hashlib.sha256(body).hexdigest()
    for client in (api, client_of(team["mia"])):
        response = client.put(f"/api/bundles/{sha256}", data=body, content_type="application/octet-stream")
        assert response.status_code in (200, 201), response.content
    assert client_of(team["mia"]).put(f"/api/bundles/{'0' * 64}", data=body,
                                      content_type="application/octet-stream").status_code == 400
    trail = entries(action="bundle.upload")
    assert [(e.actor_label, e.target_id, e.target_label, e.detail["new"]) for e in trail] == [
        ("alice", sha256, sha256[:12], True), ("mia", sha256, sha256[:12], False)]
    assert trail[0].detail["files"] == 1


def test_what_the_controller_does_on_its_own_is_recorded_as_the_system(db):
    machine, _ = machine_create(name="cli-box", host="10.0.0.6")
    (entry,) = entries(target_type="machine", target_id=str(machine.pk))
    assert entry.actor is None and entry.actor_label == "system" and entry.source_ip is None


# --- what is not ----------------------------------------------------------------------------------
def test_a_refused_action_records_nothing(staff_api, team, two_machines):
    job_id = client_of(team["ada"]).post("/api/jobs", SPEC, format="json").json()["id"]
    AuditEntry.objects.all().delete()
    mia, vic, oz = client_of(team["mia"]), client_of(team["vic"]), client_of(team["oz"])

    assert vic.post("/api/jobs", SPEC, format="json").status_code == 403  # a viewer submits
    assert mia.post("/api/jobs", {**SPEC, "entrypoint": ""}, format="json").status_code == 400
    assert mia.post(f"/api/jobs/{job_id}/stop").status_code == 403  # not her job
    assert mia.post(f"/api/network/distributed/stop/{job_id}").status_code == 403
    assert oz.delete(f"/api/jobs/{job_id}").status_code == 404  # not his project
    assert mia.post("/api/machines", {"name": "mine", "host": "10.0.0.7"}, format="json").status_code == 403
    assert staff_api.post("/api/machines", {"name": "bad name!", "host": "10.0.0.7"}, format="json").status_code == 400
    assert mia.patch(f"/api/machines/{two_machines[0].pk}", {"status": "draining"}, format="json").status_code == 403
    assert mia.post(f"/api/machines/{two_machines[0].pk}/rotate-token").status_code == 403
    assert mia.post("/api/projects/vision/members", {"username": "oz", "role": "admin"}, format="json").status_code == 403
    assert staff_api.post("/api/projects/vision/members", {"username": "nobody"}, format="json").status_code == 400

    assert list(AuditEntry.objects.all()) == []


def test_removing_a_machine_that_runs_nodes_without_force_records_nothing(staff_api, team, two_machines):
    job = make_job(name="live", owner=team["ada"], project=team["vision"], status=Job.Status.RUNNING)
    JobNode.objects.create(job=job, attempt=0, machine=two_machines[0], machine_name=two_machines[0].name, host="h",
                           node_rank=0, nproc=1, rank_start=0, rank_end=0, status=JobNode.Status.RUNNING)
    before = AuditEntry.objects.count()
    assert staff_api.delete(f"/api/machines/{two_machines[0].pk}").status_code == 409
    assert AuditEntry.objects.count() == before


# --- who reads it ----------------------------------------------------------------------------------
def test_only_staff_read_the_log(staff_api, team, anonymous):
    machine_create(name="m", host="10.0.0.8")
    assert [e["action"] for e in log(staff_api)] == ["machine.add", "token.create"]  # newest first: the fixture's token
    for name in ("ada", "mia", "vic", "oz"):
        assert client_of(team[name]).get("/api/audit").status_code == 403
    assert anonymous.get("/api/audit").status_code == 401
    # Read-only: no method writes an entry.
    entry_id = log(staff_api)[0]["id"]
    for method in ("post", "put", "patch", "delete"):
        assert getattr(staff_api, method)("/api/audit", {"id": entry_id}, format="json").status_code == 405
    assert AuditEntry.objects.filter(pk=entry_id).exists()


def test_the_log_filters_and_pages_newest_first(staff_api, team, two_machines):
    AuditEntry.objects.filter(action="token.create").delete()  # the `staff_api` fixture's own token
    ada = client_of(team["ada"])
    job_id = ada.post("/api/jobs", SPEC, format="json").json()["id"]
    ada.post("/api/projects/vision/members", {"username": "oz", "role": "viewer"}, format="json")
    earlier = timezone.now() - timedelta(hours=1)
    AuditEntry.objects.filter(action="machine.add").update(created=earlier)

    assert {e["action"] for e in log(staff_api, "?actor=ada")} == {"job.submit", "project.member_add"}
    assert [e["target_id"] for e in log(staff_api, "?action=job.submit")] == [str(job_id)]
    assert [e["action"] for e in log(staff_api, "?project=vision")] == ["project.member_add", "job.submit"]
    assert [e["target_label"] for e in log(staff_api, "?target_type=user&target_id=" + str(team["oz"].pk))] == ["oz"]
    assert len(log(staff_api, "?project=nlp")) == 0
    since = (earlier + timedelta(minutes=1)).isoformat().replace("+00:00", "Z")
    assert {e["action"] for e in log(staff_api, f"?since={since}")} == {"job.submit", "project.member_add"}
    assert {e["action"] for e in log(staff_api, f"?until={since}")} == {"machine.add"}

    first = staff_api.get("/api/audit?limit=2").json()
    assert [e["action"] for e in first["results"]] == ["project.member_add", "job.submit"]
    rest = staff_api.get(first["next"]).json()
    assert [e["action"] for e in rest["results"]] == ["machine.add", "machine.add"] and rest["next"] is None

    bad = staff_api.get("/api/audit?action=job.launch&since=yesterday")
    assert bad.status_code == 400 and set(bad.json()) == {"action", "since"}


def test_staff_read_the_log_in_the_admin_and_cannot_change_it(staff, team):
    machine_create(name="m", host="10.0.0.8")
    entry = AuditEntry.objects.get()
    browser = Client()
    browser.force_login(staff)  # staff, not a superuser: no model permissions granted
    page = browser.get("/admin/audit/auditentry/?action__exact=machine.add")
    assert page.status_code == 200 and b"machine.add" in page.content
    assert browser.get(f"/admin/audit/auditentry/{entry.pk}/change/").status_code == 200
    assert browser.get("/admin/audit/auditentry/add/").status_code == 403
    assert browser.post(f"/admin/audit/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code == 403
    assert AuditEntry.objects.filter(pk=entry.pk).exists()
    member = Client()
    member.force_login(team["mia"])
    assert member.get("/admin/audit/auditentry/").status_code == 302  # to the admin's login


# --- the cluster view: per-project usage -----------------------------------------------------------
@pytest.fixture
def busy_machine(team):
    """A GPU machine where a job of `vision` runs 2 GPUs over 4 processes, on two nodes."""
    machine, _ = bring_online("gpu-big", gpus=[{"index": i, "name": "H100", "memory_mb": 81_000} for i in range(4)])
    job = make_job(name="secret-vision-run", owner=team["ada"], project=team["vision"],
                             status=Job.Status.RUNNING)
    for rank, gpus in enumerate(([0], [1])):
        JobNode.objects.create(job=job, attempt=0, machine=machine, machine_name=machine.name, host=machine.host,
                               node_rank=rank, nproc=2, rank_start=2 * rank, rank_end=2 * rank + 1, gpus=gpus,
                               status=JobNode.Status.RUNNING)
    # A finished node takes nothing.
    JobNode.objects.create(job=job, attempt=0, machine=machine, machine_name=machine.name, host=machine.host,
                           node_rank=2, nproc=8, rank_start=4, rank_end=11, gpus=[2, 3], status=JobNode.Status.COMPLETED)
    return machine, job


def test_everyone_sees_which_project_takes_a_machine_but_not_its_jobs(team, busy_machine):
    machine, job = busy_machine
    oz = client_of(team["oz"])  # a viewer of nlp only
    response = oz.get("/api/machines")
    (listed,) = [m for m in response.json() if m["id"] == machine.pk]
    assert listed["usage"] == [{"project": "vision", "gpus": 2, "processes": 4}]
    assert job.name.encode() not in response.content
    assert oz.get(f"/api/machines/{machine.pk}").json()["usage"] == listed["usage"]
    status = oz.get("/api/network/status").json()
    assert [m["usage"] for m in status["machines"] if m["id"] == machine.pk] == [listed["usage"]]
    assert oz.get(f"/api/jobs/{job.pk}").status_code == 404


@pytest.mark.django_db(transaction=True)
async def test_the_cluster_stream_shows_usage_to_a_viewer_of_another_project(team, busy_machine):
    machine, job = busy_machine
    communicator = WebsocketCommunicator(ClusterStreamConsumer.as_asgi(), "/api/cluster/stream")
    communicator.scope["user"] = team["oz"]
    connected, _ = await communicator.connect()
    assert connected
    machines = await communicator.receive_json_from(timeout=10)
    jobs = await communicator.receive_json_from(timeout=10)
    await communicator.disconnect()
    # The consumer's queries ran on a thread of their own: its connection would outlive the test database.
    await database_sync_to_async(connections.close_all)()
    assert machines["type"] == "machines"
    assert [m["usage"] for m in machines["machines"] if m["id"] == machine.pk] == [
        [{"project": "vision", "gpus": 2, "processes": 4}]]
    assert jobs == {"type": "jobs", "jobs": []}  # vision's job is not his to see

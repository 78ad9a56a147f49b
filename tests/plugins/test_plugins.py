"""Plugins (TransformerLab): a plugin directory uploaded as a bundle and registered with its manifest's
fields, listed beside the built-in recipes, and run by name through every seed route that takes a
plugin_name (under launcher accelerate); the plan's job_id queues and dispatches that job."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
from clients import signed_in
from torchyard.bundles import pack_directory
from torchyard_server.audit.models import AuditEntry
from torchyard_server.bundles.models import Bundle
from torchyard_server.jobs.models import Job
from torchyard_server.plugins.models import Plugin
from torchyard_server.projects.models import Project

pytestmark = pytest.mark.django_db

PLUGIN_FIELDS = {"name", "version", "description", "entrypoint", "default_config", "builtin", "bundle",
                 "created_at", "project"}


@pytest.fixture(autouse=True)
def store(settings, tmp_path):
    settings.STORAGE_URL = (tmp_path / "store").as_uri()


def upload_dir(client, directory: Path, tmp: Path) -> str:
    """Pack and upload a directory as `torchyard plugin push` does; its sha256."""
    packed = pack_directory(directory, tmp / f"{directory.name}.tar.zst")
    body = packed.path.read_bytes()
    assert hashlib.sha256(body).hexdigest() == packed.sha256
    response = client.put(f"/api/bundles/{packed.sha256}", data=body, content_type="application/octet-stream")
    assert response.status_code in (200, 201), response.content
    return packed.sha256


@pytest.fixture
def bundle(api, tmp_path) -> str:
    plugin = tmp_path / "llama_trainer"
    plugin.mkdir()
    (plugin / "main.py").write_text("print('training')\n")
    (plugin / "utils.py").write_text("")
    return upload_dir(api, plugin, tmp_path)


def manifest(bundle: str, **extra) -> dict:
    return {"name": "llama_trainer", "version": "1.2.0", "description": "fine-tunes a llama",
            "entrypoint": "main.py", "default_config": {"batch_size": 8, "lr": 0.001}, "bundle": bundle, **extra}


def test_a_pushed_plugin_is_listed_beside_the_built_in_ones_and_a_new_version_replaces_it(api, bundle):
    created = api.post("/api/plugins", manifest(bundle), format="json")
    assert created.status_code == 201, created.content
    plugin = created.json()
    assert set(plugin) == PLUGIN_FIELDS
    assert plugin["builtin"] is False and plugin["bundle"] == bundle and plugin["project"] == "default"
    assert plugin["default_config"] == {"batch_size": 8, "lr": 0.001} and plugin["created_at"]

    listed = api.get("/api/plugins").json()
    builtins = [p for p in listed if p["builtin"]]
    assert {p["name"] for p in builtins} >= {"mlp_ddp", "char_gpt"}
    assert all(p["bundle"] is None and p["created_at"] is None and p["entrypoint"].startswith("examples/")
               for p in builtins)
    assert [p for p in listed if not p["builtin"]] == [plugin]

    again = api.post("/api/plugins", manifest(bundle, version="1.3.0"), format="json")
    assert again.status_code == 200 and again.json()["version"] == "1.3.0"
    assert Plugin.objects.count() == 1


def test_a_plugin_is_shown_and_removed_by_name_and_both_pushes_and_the_removal_are_audited(
        api, owner, bundle, django_user_model):
    lab = Project.objects.create(name="lab")
    lab.memberships.create(user=owner, role="member")
    assert api.post("/api/plugins", manifest(bundle, project="lab"), format="json").status_code == 201
    assert api.post("/api/plugins", manifest(bundle, project="lab", version="1.3.0"), format="json").status_code == 200
    shown = api.get("/api/plugins/lab/llama_trainer")
    assert shown.status_code == 200 and shown.json()["version"] == "1.3.0" and set(shown.json()) == PLUGIN_FIELDS

    # Another member may see it but not remove it; outside the project it is not found.
    mia, oz = django_user_model.objects.create_user("mia"), django_user_model.objects.create_user("oz")
    lab.memberships.create(user=mia, role="member")
    assert signed_in(mia).get("/api/plugins/lab/llama_trainer").status_code == 200
    assert signed_in(mia).delete("/api/plugins/lab/llama_trainer").status_code == 403
    assert signed_in(oz).get("/api/plugins/lab/llama_trainer").status_code == 404
    assert signed_in(oz).delete("/api/plugins/lab/llama_trainer").status_code == 404
    assert api.get("/api/plugins/lab/nothing_here").status_code == 404

    assert api.delete("/api/plugins/lab/llama_trainer").status_code == 204
    assert not Plugin.objects.exists() and api.get("/api/plugins/lab/llama_trainer").status_code == 404
    # Its code stays: jobs that ran it keep their bundle.
    assert Bundle.objects.filter(sha256=bundle).exists()

    entries = [(e.action, e.detail.get("version"), e.detail.get("replaced_version"), e.actor_label, e.project.name)
               for e in AuditEntry.objects.filter(target_type="plugin").order_by("id")]
    assert entries == [("plugin.push", "1.2.0", None, "alice", "lab"), ("plugin.push", "1.3.0", "1.2.0", "alice", "lab"),
                       ("plugin.delete", "1.3.0", None, "alice", "lab")]


@pytest.mark.parametrize(("change", "field", "words"), [
    ({"name": None}, "name", "required"),
    ({"name": "../evil"}, "name", "letters, digits"),
    ({"name": "mlp_ddp"}, "name", "built-in"),
    ({"entrypoint": "../outside.py"}, "entrypoint", "inside the plugin"),
    ({"entrypoint": "train.py"}, "entrypoint", "is not a file of bundle"),
    ({"entrypoint": "utils"}, "entrypoint", "Python script"),
    ({"default_config": [1, 2]}, "default_config", ""),
    ({"bundle": "0" * 64}, "bundle", "no such bundle"),
])
def test_an_invalid_manifest_is_refused_naming_the_field(api, bundle, change, field, words):
    body = {k: v for k, v in {**manifest(bundle), **change}.items() if v is not None}
    response = api.post("/api/plugins", body, format="json")
    assert response.status_code == 400, response.content
    assert field in response.json() and words in " ".join(response.json()[field])
    assert not Plugin.objects.exists()


def test_a_plugin_is_seen_and_run_by_its_projects_members_only(api, owner, bundle, django_user_model, two_machines,
                                                               tmp_path):
    lab = Project.objects.create(name="lab")
    lab.memberships.create(user=owner, role="member")
    assert api.post("/api/plugins", manifest(bundle, project="lab"), format="json").status_code == 201
    mia, oz = django_user_model.objects.create_user("mia"), django_user_model.objects.create_user("oz")
    lab.memberships.create(user=mia, role="member")
    plan = {"plugin_name": "llama_trainer", "project": "lab", "resource_requirements": {"num_machines": 2}}

    member, outsider = signed_in(mia), signed_in(oz)
    assert "llama_trainer" in {p["name"] for p in member.get("/api/plugins").json()}
    assert member.post("/api/network/distributed/plan", plan, format="json").status_code == 200
    # mia runs alice's code through the plugin, not a bundle she uploaded herself.
    assert member.post("/api/network/distributed/dispatch", plan, format="json").status_code == 201

    assert "llama_trainer" not in {p["name"] for p in outsider.get("/api/plugins").json()}
    refused = outsider.post("/api/network/distributed/plan", {**plan, "project": "default"}, format="json")
    assert refused.status_code == 400 and "unknown plugin 'llama_trainer'" in refused.json()["plugin_name"][0]
    # A member of the project the plugin is not in is told where it is.
    wrong = member.post("/api/network/distributed/plan", {**plan, "project": "default"}, format="json")
    assert "registered in project lab" in wrong.json()["plugin_name"][0]
    # mia may not push a new version of alice's plugin, even of code she uploaded herself.
    own = tmp_path / "mine"
    own.mkdir()
    (own / "main.py").write_text("print('mine')\n")
    refused = member.post("/api/plugins", manifest(upload_dir(member, own, tmp_path), project="lab"), format="json")
    assert refused.status_code == 403 and "alice" in refused.json()["detail"]


def test_a_projects_plugin_runs_from_the_job_routes_as_the_dashboard_launches_it(api, owner, bundle, django_user_model,
                                                                                    two_machines):
    lab = Project.objects.create(name="lab")
    lab.memberships.create(user=owner, role="member")
    assert api.post("/api/plugins", manifest(bundle, project="lab"), format="json").status_code == 201
    mia, oz = django_user_model.objects.create_user("mia"), django_user_model.objects.create_user("oz")
    lab.memberships.create(user=mia, role="member")
    # The New job form's spec for a picked plugin: its bundle and entrypoint, under launcher accelerate.
    spec = {"name": "llama", "project": "lab", "entrypoint": "main.py", "code": {"bundle": bundle},
            "distributed": {"launcher": "accelerate"}, "resources": {"nodes": 2}}
    assert signed_in(mia).post("/api/jobs", spec, format="json").status_code == 201
    refused = signed_in(oz).post("/api/jobs", {**spec, "project": "default"}, format="json")
    assert refused.status_code == 400 and "no such bundle for this user" in refused.json()["code"]["bundle"][0]


def test_an_unknown_plugin_name_is_refused_naming_the_plugins_there_are(api, bundle, two_machines):
    api.post("/api/plugins", manifest(bundle), format="json")
    for route in ("/api/network/distributed/plan", "/api/network/distributed/dispatch", "/api/tasks"):
        response = api.post(route, {"plugin_name": "no_such_trainer"}, format="json")
        assert response.status_code == 400, (route, response.content)
        message = response.json()["plugin_name"][0]
        assert "unknown plugin 'no_such_trainer'" in message and "llama_trainer" in message and "mlp_ddp" in message


def test_the_plans_job_id_is_queued_and_dispatched_as_the_plugin_job_it_planned(api, bundle, two_machines):
    api.post("/api/plugins", manifest(bundle), format="json")
    body = {"plugin_name": "llama_trainer", "config": {"lr": 0.01},
            "resource_requirements": {"num_machines": 2, "procs_per_machine": 2}}
    planned = api.post("/api/network/distributed/plan", body, format="json")
    assert planned.status_code == 200, planned.content
    plan = planned.json()
    assert plan["job_id"] == f"plan-{plan['task_id']}" and not Job.objects.exists()
    spec = plan["spec"]
    assert spec["code"]["bundle"] == bundle and spec["entrypoint"] == "main.py"
    assert spec["distributed"]["launcher"] == "accelerate" and plan["execution_plan"]["launcher"] == "accelerate"
    assert spec["hyperparameters"] == {"batch_size": 8, "lr": 0.01}  # the default config under the request's
    # Planning the same job again is the same task.
    assert api.post("/api/network/distributed/plan", body, format="json").json()["job_id"] == plan["job_id"]
    assert api.get(f"/api/tasks/{plan['task_id']}").json()["plugin_name"] == "llama_trainer"

    # The seed's UI flow: queue the plan's job.
    queued = api.get(f"/api/tasks/{plan['job_id']}/queue_distributed")
    assert queued.status_code == 201, queued.content
    job = Job.objects.get(pk=queued.json()["job_id"])
    assert job.spec["code"] == spec["code"] and job.spec["distributed"]["launcher"] == "accelerate"

    # Dispatched whole by its job_id, and rank by rank with the plan standing for the rest.
    whole = api.post("/api/network/distributed/dispatch", {"job_id": plan["job_id"]}, format="json")
    assert whole.status_code == 201 and Job.objects.get(pk=whole.json()["job_id"]).spec["entrypoint"] == "main.py"
    ranks = [{"job_id": str(plan["job_id"]), "target_machine": m.name, "rank": r, "world_size": 2}
             for r, m in enumerate(two_machines)]
    assert api.post("/api/network/distributed/dispatch", ranks[0], format="json").status_code == 202
    last = api.post("/api/network/distributed/dispatch", ranks[1], format="json")
    assert last.status_code == 201, last.content
    per_rank = Job.objects.get(pk=last.json()["job_id"])
    assert per_rank.spec["placement"]["machines"] == [m.name for m in two_machines]
    assert per_rank.spec["hyperparameters"] == {"batch_size": 8, "lr": 0.01}

    assert api.post("/api/network/distributed/dispatch", {"job_id": "dist_job_123"}, format="json").status_code == 400
    assert api.post("/api/network/distributed/dispatch", {"job_id": "plan-999999"}, format="json").status_code == 404


def test_launcher_accelerate_runs_an_entrypoint_not_a_module(api, bundle, two_machines):
    spec = {"name": "m", "code": {"bundle": bundle}, "module": "main", "distributed": {"launcher": "accelerate"}}
    response = api.post("/api/jobs", spec, format="json")
    assert response.status_code == 400 and "plugin harness" in response.json()["module"][0]

"""TransformerLab's tasks (`/api/tasks`): saved job templates in the seed's shape, submitted as a
distributed job or as a whole job on one machine, with the rules of jobs for who may do what."""

from __future__ import annotations

import pytest
from clients import signed_in
from rest_framework.test import APIClient
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec import secretbox
from torchyard_server.projects.models import Membership, Project
from torchyard_server.templates.models import JobTemplate

from .status_routes import STATUS_FIELDS

pytestmark = pytest.mark.django_db

SEED_TASK = {
    "name": "mlp-two-machines",
    "plugin_name": "mlp_ddp",
    "config": {"batch_size": 64, "lr": 0.001},
    "resource_requirements": {"num_machines": 2, "gpus_per_machine": 0, "procs_per_machine": 2},
    "args": ["--steps", "50"],
}
TASK_FIELDS = {"id", "name", "type", "plugin_name", "config", "resource_requirements", "machine_selection",
               "selected_machines", "args", "project", "owner", "spec", "created_at", "updated_at"}


def test_a_task_is_saved_from_the_seeds_fields_and_shown_in_the_seeds_shape(api):
    response = api.post("/api/tasks", SEED_TASK, format="json")
    assert response.status_code == 201, response.content
    task = response.json()
    assert set(task) == TASK_FIELDS
    assert task["name"] == "mlp-two-machines"
    assert task["type"] == "TRAIN"
    assert task["plugin_name"] == "mlp_ddp"
    assert task["config"] == {"batch_size": 64, "lr": 0.001}
    assert task["resource_requirements"] == {"num_machines": 2, "gpus_per_machine": 0, "min_gpu_memory": 0,
                                             "procs_per_machine": 2}
    assert task["machine_selection"] == "auto" and task["selected_machines"] == []
    assert task["args"] == ["--steps", "50"]
    assert task["project"] == "default" and task["owner"] == "alice"
    assert task["spec"]["entrypoint"] == "examples/mlp_ddp.py"
    assert task["spec"]["resources"] == {"nodes": 2, "procs_per_node": 2, "gpus_per_node": 0, "min_gpu_memory": 0}
    saved = JobTemplate.objects.get(pk=task["id"])
    assert saved.spec == task["spec"] and saved.project.name == "default"

    assert api.get("/api/tasks").json() == [task]
    assert api.get(f"/api/tasks/{task['id']}").json() == task


def test_a_task_is_replaced_with_put_and_deleted(api):
    task = api.post("/api/tasks", SEED_TASK, format="json").json()
    manual = {**SEED_TASK, "name": "renamed", "machine_selection": "manual", "selected_machines": ["gpu-a", "gpu-b"],
              "config": {"batch_size": 128}}
    changed = api.put(f"/api/tasks/{task['id']}", manual, format="json")
    assert changed.status_code == 200, changed.content
    body = changed.json()
    assert (body["id"], body["name"], body["config"]) == (task["id"], "renamed", {"batch_size": 128})
    assert body["machine_selection"] == "manual" and body["selected_machines"] == ["gpu-a", "gpu-b"]
    assert body["spec"]["placement"]["machines"] == ["gpu-a", "gpu-b"]
    deleted = api.delete(f"/api/tasks/{task['id']}")
    assert deleted.status_code == 200 and deleted.json() == {"message": f"task {task['id']} deleted"}
    assert api.get(f"/api/tasks/{task['id']}").status_code == 404
    assert not JobTemplate.objects.exists()


def test_a_task_may_be_a_whole_jobspec_whose_secrets_are_never_shown(api):
    spec = {"name": "secret-run", "entrypoint": "examples/mlp_ddp.py", "resources": {"workers": 4},
            "secret_env": {"WANDB_API_KEY": "s3cr3t"}}
    response = api.post("/api/tasks", {"spec": spec}, format="json")
    assert response.status_code == 201, response.content
    task = response.json()
    assert task["name"] == "secret-run" and task["spec"]["secret_env"] == {"WANDB_API_KEY": "***"}
    # A DistroML spec has no machine count until it is planned.
    assert task["resource_requirements"]["num_machines"] is None
    stored = JobTemplate.objects.get(pk=task["id"]).spec["secret_env"]["WANDB_API_KEY"]
    assert stored != "s3cr3t" and secretbox.unseal(stored) == "s3cr3t"


def test_bad_task_bodies_get_a_400_naming_the_field(api):
    neither = api.post("/api/tasks", {"name": "x"}, format="json")
    assert neither.status_code == 400 and "plugin_name" in neither.json()
    both = api.post("/api/tasks", {**SEED_TASK, "spec": {"name": "y", "entrypoint": "examples/mlp_ddp.py"}}, format="json")
    assert both.status_code == 400 and "plugin_name" in both.json()
    unknown = api.post("/api/tasks", {**SEED_TASK, "plugin_name": "llama_trainer"}, format="json")
    assert unknown.status_code == 400 and "unknown plugin" in unknown.json()["plugin_name"][0]
    bad_spec = api.post("/api/tasks", {"spec": {"name": "z", "entrypoint": "examples/mlp_ddp.py",
                                                "resources": {"nodes": 0}}}, format="json")
    assert bad_spec.status_code == 400 and "nodes" in bad_spec.json()["spec"]["resources"]


def test_queue_distributed_submits_the_task_as_saved(api, two_machines):
    task = api.post("/api/tasks", SEED_TASK, format="json").json()
    response = api.get(f"/api/tasks/{task['id']}/queue_distributed")
    assert response.status_code == 201, response.content
    status = response.json()
    assert set(status) == STATUS_FIELDS
    assert status["status"] == "queued" and status["nodes"] == [] and status["attempt"] == 0
    assert status["seed_job_id"] is None and status["waiting_for_ranks"] == []
    job = Job.objects.get(pk=status["job_id"])
    assert job.name == "mlp-two-machines" and job.owner.username == "alice"
    assert job.spec == JobTemplate.objects.get(pk=task["id"]).spec
    # Again: a task is submitted as often as asked, one job each time.
    assert api.post(f"/api/tasks/{task['id']}/queue_distributed").json()["job_id"] != job.pk


def test_queue_on_a_machine_puts_every_process_of_the_job_there(api, two_machines):
    task = api.post("/api/tasks", SEED_TASK, format="json").json()
    target = two_machines[1]
    response = api.get(f"/api/tasks/{task['id']}/queue/{target.pk}")
    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["job_id"])
    assert job.spec["resources"] == {"nodes": 1, "procs_per_node": 4, "gpus_per_node": 0, "min_gpu_memory": 0}
    assert job.spec["placement"]["machines"] == [target.name]
    assert job.spec["hyperparameters"] == SEED_TASK["config"]
    assert api.get(f"/api/tasks/{task['id']}/queue/999999").status_code == 404


def test_a_task_the_machines_can_never_hold_is_refused_with_why(api, two_machines):
    # Saved while it may fit one day (a task is not planned until it is submitted).
    many = {**SEED_TASK, "resource_requirements": {"num_machines": 4, "procs_per_machine": 2}}
    task = api.post("/api/tasks", many, format="json").json()
    response = api.get(f"/api/tasks/{task['id']}/queue_distributed")
    assert response.status_code == 400 and "needs 4 online machines" in response.json()["detail"]
    assert not Job.objects.exists()


def test_the_seeds_suggest_machines_route_still_answers_beside_the_tasks(api, two_machines):
    body = api.get("/api/tasks/distributed/suggest_machines?num_machines=2").json()
    assert body["enough"] and sorted(body["suggested"]) == sorted(m.pk for m in two_machines)


def test_who_may_see_change_and_submit_a_task_follows_the_rules_of_jobs(django_user_model, two_machines):
    ada, mia, vic, oz = (django_user_model.objects.create_user(n) for n in ("ada", "mia", "vic", "oz"))
    lab = Project.objects.create(name="lab")
    for user, role in ((ada, "admin"), (mia, "member"), (vic, "viewer")):
        Membership.objects.create(project=lab, user=user, role=role)
    task = signed_in(ada).post("/api/tasks", {**SEED_TASK, "project": "lab"}, format="json").json()
    url = f"/api/tasks/{task['id']}"

    member, viewer, outsider = signed_in(mia), signed_in(vic), signed_in(oz)
    assert member.get(url).status_code == 200 and viewer.get(url).status_code == 200
    assert [t["id"] for t in viewer.get("/api/tasks").json()] == [task["id"]]
    assert outsider.get(url).status_code == 404 and outsider.get("/api/tasks").json() == []
    # ada's task: mia may submit it, not change or delete it; vic may do neither.
    assert member.put(url, SEED_TASK, format="json").status_code == 403
    assert member.delete(url).status_code == 403
    queued = member.get(f"{url}/queue_distributed")
    assert queued.status_code == 201 and Job.objects.get(pk=queued.json()["job_id"]).owner == mia
    assert viewer.get(f"{url}/queue_distributed").status_code == 403
    assert viewer.post("/api/tasks", {**SEED_TASK, "project": "lab"}, format="json").status_code == 403
    assert outsider.get(f"{url}/queue_distributed").status_code == 404
    assert outsider.delete(url).status_code == 404
    assert signed_in(ada).delete(url).status_code == 200


def test_a_browser_session_queues_with_post_not_with_a_get_another_site_could_send(owner, two_machines, api):
    task = api.post("/api/tasks", SEED_TASK, format="json").json()
    browser = APIClient()
    browser.force_login(owner)
    refused = browser.get(f"/api/tasks/{task['id']}/queue_distributed")
    assert refused.status_code == 403 and "POST" in refused.json()["detail"]
    assert browser.get(f"/api/tasks/{task['id']}/queue/{two_machines[0].pk}").status_code == 403
    assert not Job.objects.exists()
    assert browser.post(f"/api/tasks/{task['id']}/queue_distributed").status_code == 201
    # Reading stays open to the session.
    assert browser.get(f"/api/tasks/{task['id']}").status_code == 200

"""What a job may put in its processes' environment (`env`, `secret_env`), and that a secret's value
never leaves the server except in the launch to its agent."""

import json

import pytest
from django.db import connection
from torchyard_server.celery import app as celery_app
from torchyard_server.jobs.api.serializers import job_detail_data
from torchyard_server.jobs.control.queue_pass import job_schedule
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec import secretbox

pytestmark = pytest.mark.django_db

SECRET = "wandb-s3cr3t-0123456789abcdef"
GOOD = {
    "name": "demo",
    "entrypoint": "examples/mlp_ddp.py",
    "resources": {"nodes": 2, "procs_per_node": 1},
    "hyperparameters": {"batch_size": 64, "lr": 0.001},
}


def spec(**changes):
    return {**GOOD, **changes}


REFUSED = [
    "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "LD_DEBUG_OUTPUT", "ld_preload", "DYLD_INSERT_LIBRARIES",
    "GCONV_PATH", "GLIBC_TUNABLES", "LOCPATH", "PYTHONSTARTUP", "PYTHONINSPECT", "PYTHONHOME",
    "PYTHONPLATLIBDIR", "PYTHONEXECUTABLE", "PYTHONUSERBASE", "PYTHONPYCACHEPREFIX", "TORCHYARD_JOB_ID",
    "TORCHYARD_ANYTHING", "TORCHELASTIC_ERROR_FILE",
]


@pytest.mark.parametrize("name", REFUSED)
@pytest.mark.parametrize("field", ["env", "secret_env"])
def test_it_refuses_loader_and_interpreter_hooks_naming_the_variable(api, two_machines, name, field):
    response = api.post("/api/jobs", spec(**{field: {name: "/tmp/x"}}), format="json")
    assert response.status_code == 400, response.json()
    [message] = response.json()[field]
    assert message.startswith(f"{name} ") and "TORCHYARD_ALLOWED_JOB_ENV" in message
    assert not Job.objects.exists()


def test_every_refused_variable_of_a_spec_is_named_at_once(api, two_machines):
    response = api.post("/api/jobs", spec(env={"LD_PRELOAD": "a", "OMP_NUM_THREADS": "2", "PYTHONHOME": "/"}),
                        format="json")
    assert response.status_code == 400
    assert [m.split()[0] for m in response.json()["env"]] == ["LD_PRELOAD", "PYTHONHOME"]


@pytest.mark.parametrize("name", ["OMP_NUM_THREADS", "PYTHONPATH", "PYTHONWARNINGS", "NCCL_DEBUG", "HF_HOME",
                                  "PYTHONFAULTHANDLER", "LDFLAGS"])
def test_ordinary_variables_are_accepted(api, two_machines, name):
    response = api.post("/api/jobs", spec(env={name: "1"}), format="json")
    assert response.status_code == 201, response.json()


def test_staff_allow_refused_variables_by_name_or_prefix_in_settings(api, two_machines, settings):
    settings.ALLOWED_JOB_ENV = ["LD_LIBRARY_PATH", "TORCHYARD_*"]
    env = {"LD_LIBRARY_PATH": "/opt/cuda/lib64", "TORCHYARD_FLAG": "1"}
    response = api.post("/api/jobs", spec(env=env), format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["env"] == env
    refused = api.post("/api/jobs", spec(env={"LD_PRELOAD": "/tmp/x.so"}), format="json")
    assert refused.status_code == 400
    assert refused.json()["env"][0].startswith("LD_PRELOAD ")


def test_torchruns_rank_variables_stay_refused_even_when_allowed(api, two_machines, settings):
    settings.ALLOWED_JOB_ENV = ["*"]
    response = api.post("/api/jobs", spec(env={"RANK": "3"}), format="json")
    assert response.status_code == 400
    assert "RANK is set by torchrun" in response.json()["env"][0]


def test_a_name_in_both_env_and_secret_env_is_refused(api, two_machines):
    response = api.post("/api/jobs", spec(env={"TOKEN": "a"}, secret_env={"TOKEN": "b"}), format="json")
    assert response.status_code == 400
    assert "TOKEN" in response.json()["secret_env"][0]


def test_an_empty_secret_is_refused(api, two_machines):
    response = api.post("/api/jobs", spec(secret_env={"TOKEN": ""}), format="json")
    assert response.status_code == 400
    assert "secret_env" in response.json()


def _submit_with_secret(api) -> dict:
    response = api.post("/api/jobs", spec(env={"WANDB_PROJECT": "demo"}, secret_env={"WANDB_API_KEY": SECRET}),
                        format="json")
    assert response.status_code == 201, response.json()
    return response.json()


def _sealed_value(job_id: int) -> str:
    return Job.objects.get(pk=job_id).spec["secret_env"]["WANDB_API_KEY"]


def test_the_api_shows_a_secrets_name_and_never_its_value(api, two_machines):
    body = _submit_with_secret(api)
    assert body["spec"]["secret_env"] == {"WANDB_API_KEY": "***"}
    assert body["spec"]["env"] == {"WANDB_PROJECT": "demo"}
    sealed = _sealed_value(body["id"])
    for path in (f"/api/jobs/{body['id']}", "/api/jobs", f"/api/jobs/{body['id']}/summary",
                 f"/api/network/distributed/status/{body['id']}"):
        response = api.get(path)
        assert response.status_code == 200, path
        text = response.content.decode()
        assert SECRET not in text and sealed not in text, path
    assert api.get(f"/api/jobs/{body['id']}").json()["spec"]["secret_env"] == {"WANDB_API_KEY": "***"}


def test_the_job_message_of_the_streams_masks_secrets(api, two_machines):
    body = _submit_with_secret(api)
    message = json.dumps(job_detail_data(Job.objects.get(pk=body["id"])), default=str)
    assert SECRET not in message and _sealed_value(body["id"]) not in message
    assert '"WANDB_API_KEY": "***"' in message


def test_the_plan_preview_does_not_echo_a_secret(api, two_machines):
    response = api.post("/api/jobs/plan", spec(secret_env={"WANDB_API_KEY": SECRET}), format="json")
    assert response.status_code == 200, response.json()
    assert SECRET not in response.content.decode()


def test_the_seed_dispatch_alias_takes_secrets_and_does_not_echo_them(api, two_machines):
    target = two_machines[1]
    response = api.post(f"/api/network/machines/{target.pk}/dispatch_job",
                        spec(secret_env={"WANDB_API_KEY": SECRET}), format="json")
    assert response.status_code == 201, response.json()
    assert SECRET not in response.content.decode()
    job_id = response.json()["job_id"]
    assert secretbox.unseal(_sealed_value(job_id)) == SECRET


def test_the_database_row_holds_ciphertext_only(api, two_machines):
    body = _submit_with_secret(api)
    with connection.cursor() as cursor:
        cursor.execute("SELECT spec FROM jobs_job WHERE id = %s", [body["id"]])
        (raw,) = cursor.fetchone()
    raw = raw if isinstance(raw, str) else json.dumps(raw)
    assert SECRET not in raw
    assert secretbox.unseal(_sealed_value(body["id"])) == SECRET


def test_the_launch_carries_the_secret_to_the_agent_in_its_own_field(api, two_machines, monkeypatch,
                                                                     django_capture_on_commit_callbacks):
    body = _submit_with_secret(api)
    sent = []
    monkeypatch.setattr(celery_app, "send_task", lambda name, **kw: sent.append((name, kw)))
    with django_capture_on_commit_callbacks(execute=True):
        job_schedule(job_id=body["id"])
    launches = [kw["kwargs"]["launch"] for name, kw in sent if "launch" in (kw.get("kwargs") or {})]
    assert len(launches) == 2
    for launch in launches:
        assert launch["secret_env"] == {"WANDB_API_KEY": SECRET}
        assert launch["env"] == {"WANDB_PROJECT": "demo"}
        assert SECRET not in json.dumps(launch["config"])


def test_secrets_sealed_under_an_old_key_open_after_a_new_key_is_put_first(settings):
    from cryptography.fernet import Fernet

    old = Fernet.generate_key().decode()
    settings.SECRET_ENV_KEYS = [old]
    sealed = secretbox.seal(SECRET)
    settings.SECRET_ENV_KEYS = [Fernet.generate_key().decode(), old]
    assert secretbox.unseal(sealed) == SECRET
    settings.SECRET_ENV_KEYS = [Fernet.generate_key().decode()]
    with pytest.raises(secretbox.SecretUnreadable):
        secretbox.unseal(sealed)


def test_a_job_whose_secrets_no_key_opens_fails_at_dispatch_saying_why(api, two_machines, settings):
    from cryptography.fernet import Fernet

    settings.SECRET_ENV_KEYS = [Fernet.generate_key().decode()]
    created = api.post("/api/jobs", spec(secret_env={"WANDB_API_KEY": SECRET}), format="json")
    assert created.status_code == 201, created.json()
    # The operator replaced the key (and SECRET_KEY, which a derived key would come from).
    settings.SECRET_ENV_KEYS = [Fernet.generate_key().decode()]
    settings.SECRET_KEY = "another-secret-key-entirely-0123456789"
    job_schedule(job_id=created.json()["id"])
    job = Job.objects.get(pk=created.json()["id"])
    assert job.status == "failed" and "cannot be decrypted" in job.status_reason
    assert not job.nodes.exists()

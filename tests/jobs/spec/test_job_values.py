"""The job's typed values (jobs/spec/jobspec.py, jobs/spec/plan.py, jobs/spec/progress.py): a spec, plan or progress
stored as JSON reads into its value and writes back as the same JSON, for specs submitted through the
API in every form."""

from __future__ import annotations

import pytest
from factories import bring_online
from torchyard_server.jobs.control.metrics import job_record_progress
from torchyard_server.jobs.control.queue_pass import job_schedule
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan
from torchyard_server.jobs.spec.progress import JobProgress

RECIPE = "examples/mlp_ddp.py"
SPECS = {
    "a recipe on two nodes": {"name": "mlp", "entrypoint": RECIPE, "resources": {"nodes": 2}, "args": ["--steps", "20"]},
    "DistroML's workers and model": {"name": "w", "model": "mlp", "dataset": "synthetic", "resources": {"workers": 2}},
    "an elastic range": {"name": "e", "entrypoint": RECIPE, "resources": {"nodes": "1:2"}, "elastic": {"min_interval": 60}},
    "secrets and the queue's fields": {
        "name": "s", "entrypoint": RECIPE, "env": {"A": "1"}, "secret_env": {"TOKEN": "hunter2"}, "time_limit": "2h",
        "preemptible": False, "preemption": {"grace": 30}, "priority": "high"},
    "a command and a stall policy": {
        "name": "c", "distributed": {"launcher": "command", "command": ["python", "-c", "print(1)"]},
        "fault_tolerance": {"stall_timeout": 120, "on_stall": "recover", "max_restarts": 0},
        "hyperparameters": {"lr": 0.1, "nested": [1, None]}},
    "a compression hook and manual placement": {
        "name": "t", "entrypoint": RECIPE, "compression": {"hook": "topk", "ratio": 0.01},
        "placement": {"machines": ["values-b"]},
        "hyperparameters": {"lr": 0.1, "batch_size": 32, "optimizer": "sgd", "momentum": 0.9, "epochs": 2}},
    "a hot spare": {"name": "h", "entrypoint": RECIPE, "resources": {"nodes": 1, "spares": 1}},
}


@pytest.fixture
def machines(db):
    return [bring_online("values-a")[0], bring_online("values-b")[0]]


@pytest.mark.parametrize("body", SPECS.values(), ids=SPECS.keys())
def test_a_submitted_spec_reads_into_its_value_and_writes_back_unchanged(api, machines, body):
    response = api.post("/api/jobs", body, format="json")
    assert response.status_code == 201, response.json()
    stored = Job.objects.get(pk=response.json()["id"]).spec
    spec = JobSpec.from_json(stored)
    assert spec.to_json() == stored
    assert spec.public_json() == response.json()["spec"]


@pytest.mark.parametrize("body", SPECS.values(), ids=SPECS.keys())
def test_a_plan_reads_into_its_value_and_writes_back_unchanged(api, machines, body):
    previewed = api.post("/api/jobs/plan", body, format="json").json()
    assert Plan.from_json(previewed).to_json() == previewed
    job_id = api.post("/api/jobs", body, format="json").json()["id"]
    job_schedule(job_id=job_id)
    job = Job.objects.get(pk=job_id)
    assert job.plan is not None and job.plan["nodes"]
    plan, spec = Plan.from_json(job.plan), JobSpec.from_json(job.spec)
    assert plan.to_json() == job.plan
    assert plan.world_size == spec.world_size or spec.is_elastic
    assert [n.machine_name for n in plan.nodes] == [n["machine_name"] for n in job.plan["nodes"]]


def test_progress_reads_into_its_value_and_writes_back_unchanged_as_a_job_runs(api, machines):
    job_id = api.post("/api/jobs", SPECS["a recipe on two nodes"], format="json").json()["id"]
    submitted = Job.objects.get(pk=job_id).progress
    assert submitted == {"step": None, "total_steps": 20, "throughput": None, "loss": None, "eta_seconds": None}
    job_schedule(job_id=job_id)
    dispatched = Job.objects.get(pk=job_id).progress
    assert dispatched["steps_per_second"] is None and dispatched["throughput_by_rank"] == {}  # stored as null
    assert JobProgress.from_json(dispatched).to_json() == dispatched
    job_record_progress(job_id=job_id, metrics=[
        {"rank": rank, "step": 5, "loss": 0.5, "throughput": 10.0, "ts": 100.0 + rank, "attempt": 0} for rank in (0, 1)])
    folded = Job.objects.get(pk=job_id).progress
    progress = JobProgress.from_json(folded)
    assert progress.to_json() == folded
    assert (progress.step, progress.throughput, progress.step_by_rank) == (5, 20.0, {"0": 5, "1": 5})


def test_the_values_read_their_sections_as_attributes(api, machines):
    spec = JobSpec.from_json(Job.objects.get(pk=api.post(
        "/api/jobs", SPECS["an elastic range"], format="json").json()["id"]).spec)
    assert (spec.resources.most_nodes, spec.resources.fewest_nodes, spec.is_elastic) == (2, 1, True)
    assert spec.resize_interval == 60 and spec.may_be_preempted and spec.code is None
    secret = JobSpec.from_json(Job.objects.get(pk=api.post(
        "/api/jobs", SPECS["secrets and the queue's fields"], format="json").json()["id"]).spec)
    assert secret.secret_env is not None and secret.secret_env["TOKEN"] != "hunter2"  # sealed when validated
    assert (secret.time_limit, secret.preemption_grace, secret.may_be_preempted) == (7200, 30.0, False)


def test_keys_of_another_server_version_and_stored_nulls_survive_a_round_trip():
    stored = {"name": "old", "future": {"kept": True},
              "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0, "later": 1},
              "fault_tolerance": {"max_restarts": 1, "heartbeat_timeout": 10.0, "stall_timeout": None,
                                  "on_stall": "report"},
              "distributed": {"backend": "auto", "launcher": "torchrun", "strategy": "data_parallel"},
              "model": None}
    spec = JobSpec.from_json(stored)
    written = spec.to_json()
    assert written["future"] == {"kept": True} and written["resources"]["later"] == 1
    assert written["model"] is None and written["fault_tolerance"]["stall_timeout"] is None
    # Stored before warm pools: it reads (and is written back) warm, as a submission without the key is.
    assert written["distributed"]["warm"] is True and "entrypoint" not in written
    assert spec.distributed.launcher == "torchrun" and spec.fault_tolerance.max_restarts == 1

"""`checkpointing.every_n_steps: auto` on the control plane: the JobSpec takes "auto" beside a number, and a
launch tells the SDK how often the job's machines have failed (jobs/control/cadence.py): lost nodes and
nodes that failed without an exception of the user's are the cluster's faults, over the hours each
machine ran, from a prior of one fault a day."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from factories import bring_online, make_job, make_node
from torchyard_server.jobs.control.cadence import PRIOR_MTBF_S, checkpoint_cadence
from torchyard_server.jobs.control.launch import launch_payload
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan

pytestmark = pytest.mark.django_db
N = JobNode.Status


def ran(job, machine, *, hours: float, status: str, rank: int, error: dict | None = None) -> JobNode:
    end = timezone.now() - timedelta(hours=1)
    return make_node(job, node_rank=rank, machine=machine, attempt=rank, status=status, error=error or {},
                     started_at=end - timedelta(hours=hours), finished_at=end)


def test_faults_of_the_cluster_count_and_the_users_own_exceptions_do_not(owner):
    a, b = bring_online("gpu-a")[0], bring_online("gpu-b")[0]
    job = make_job(owner=owner)
    ran(job, a, hours=6, status=N.LOST, rank=0)  # the machine went away
    ran(job, a, hours=4, status=N.FAILED, rank=1)  # killed: no exception of the script's
    ran(job, a, hours=2, status=N.FAILED, rank=2, error={"type": "ValueError", "message": "bad batch"})
    ran(job, b, hours=12, status=N.COMPLETED, rank=3)
    hour = 3600.0
    mtbf = checkpoint_cadence([a.pk, b.pk], ["gpu-a", "gpu-b"])
    # gpu-a: (2 + 1) faults over 12 h + the prior's 24 h; gpu-b: (0 + 1) over 12 h + 24 h.
    expected = 1 / (3 / (12 * hour + PRIOR_MTBF_S) + 1 / (12 * hour + PRIOR_MTBF_S))
    assert mtbf["mtbf_seconds"] == pytest.approx(expected, abs=0.1)
    assert mtbf["why"].startswith("2 fault(s) in 24.0 machine-hours on gpu-a, gpu-b over the last 30 days")


def test_a_new_cluster_is_taken_to_fail_daily_per_machine():
    assert checkpoint_cadence([], [])["mtbf_seconds"] == PRIOR_MTBF_S
    machine = bring_online("fresh")[0]
    assert checkpoint_cadence([machine.pk], ["fresh"])["mtbf_seconds"] == PRIOR_MTBF_S


def test_the_jobspec_takes_auto_or_a_number_and_the_launch_carries_the_estimate(api, two_machines):
    refused = api.post("/api/jobs", {"name": "c", "checkpointing": {"every_n_steps": "often"}}, format="json")
    assert refused.status_code == 400
    assert refused.json()["checkpointing"]["every_n_steps"] == ['a number of steps (1 to 10000000) or "auto".']
    response = api.post("/api/jobs", {"name": "c", "entrypoint": "examples/mlp_ddp.py",
                                      "resources": {"nodes": 2, "procs_per_node": 1},
                                      "checkpointing": {"every_n_steps": "auto"}}, format="json")
    assert response.status_code == 201, response.json()
    assert response.json()["spec"]["checkpointing"]["every_n_steps"] == "auto"
    job = Job.objects.get(pk=response.json()["id"])
    plan = {"nnodes": 2, "procs_per_node": 1, "world_size": 2, "master_addr": "10.0.0.1", "master_port": 29500,
            "backend": "gloo", "nodes": [
                {"node_rank": 0, "host": "10.0.0.1", "machine_name": "gpu-a", "machine_id": two_machines[0].pk},
                {"node_rank": 1, "host": "10.0.0.2", "machine_name": "gpu-b", "machine_id": two_machines[1].pk}]}
    node = make_node(job, machine=two_machines[0])
    config = launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(plan), node, "")["config"]
    cadence = config["checkpointing"]["cadence"]
    assert cadence["mtbf_seconds"] == PRIOR_MTBF_S / 2  # two machines, no history: each fails daily
    assert "on gpu-a, gpu-b" in cadence["why"]

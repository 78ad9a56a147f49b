"""framework ray in a JobSpec: it becomes launcher ray (one Ray node per machine), a launcher set
against it is a 400 naming distributed.launcher; a Ray job completes with its driver on node 0, and a
lost worker is tolerated only when fault_tolerance.ray_worker_loss says so."""

import pytest
from torchyard import protocol
from torchyard_server.bundles.models import Bundle
from torchyard_server.jobs.control.launch import launch_payload as _launch_payload
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan

SHA = "d" * 64


@pytest.fixture
def bundle(owner):
    made = Bundle.objects.create(sha256=SHA, size=10, unpacked_size=10, files=[{"path": "driver.py", "size": 1}])
    made.owners.add(owner)
    return made


def submit(api, **fields):
    spec = {"name": "r", "code": {"bundle": SHA}, "entrypoint": "driver.py", "framework": "ray",
            "resources": {"nodes": 2, "procs_per_node": 1}, **fields}
    return api.post("/api/jobs", spec, format="json")


@pytest.mark.django_db
def test_framework_ray_is_launcher_ray_in_the_spec_the_plan_and_the_launch(api, two_machines, bundle):
    response = submit(api, resources={"workers": 2, "cpus_per_node": 1})
    assert response.status_code == 201, response.json()
    spec = response.json()["spec"]
    assert (spec["framework"], spec["distributed"]["launcher"]) == ("ray", "ray")
    job = Job.objects.get(pk=response.json()["id"])
    node = job.nodes.order_by("node_rank").first()
    if node is not None:
        payload = _launch_payload(job, JobSpec.from_json(job.spec), Plan.from_json(job.plan), node, "")
        assert payload["launcher"] == "ray" and payload["nnodes"] == 2


@pytest.mark.django_db
@pytest.mark.parametrize("launcher", ["torchrun", "none", "command"])
def test_a_ray_job_with_another_launcher_is_a_400_naming_the_field(api, two_machines, bundle, launcher):
    distributed = {"launcher": launcher, **({"command": ["python", "x.py"]} if launcher == "command" else {})}
    response = submit(api, distributed=distributed)
    assert response.status_code == 400
    assert "Ray" in response.json()["distributed"]["launcher"][0]


@pytest.mark.django_db
def test_ray_worker_loss_is_refused_outside_ray_jobs_and_checked_in_them(api, two_machines, bundle):
    response = submit(api, framework="pytorch", fault_tolerance={"ray_worker_loss": "tolerate"})
    assert response.status_code == 400 and "ray_worker_loss" in response.json()["fault_tolerance"]
    response = submit(api, fault_tolerance={"ray_worker_loss": "sometimes"})
    assert response.status_code == 400 and "ray_worker_loss" in response.json()["fault_tolerance"]
    assert submit(api, fault_tolerance={"ray_worker_loss": "tolerate"}).status_code == 201


def ray_job(owner, **ft):
    job = Job.objects.create(name="r", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=2,
                             spec={"framework": "ray", "distributed": {"launcher": "ray"},
                                   "fault_tolerance": {"max_restarts": 0, **ft}})
    nodes = [JobNode.objects.create(job=job, attempt=0, machine_name=f"m{r}", host=f"10.0.0.{r}", node_rank=r,
                                    nproc=1, rank_start=r, rank_end=r, status=JobNode.Status.RUNNING)
             for r in range(2)]
    return job, nodes


@pytest.mark.django_db(transaction=True)
def test_the_driver_exiting_0_on_the_head_completes_the_job_and_stops_the_workers(owner):
    job, (head, worker) = ray_job(owner)
    node_report_state(event={"node": head.pk, "status": protocol.NODE_RUNNING, "pid": 5,
                             "ray": {"head": True, "dashboard_port": 12345}})
    assert JobNode.objects.get(pk=head.pk).progress["ray"]["dashboard_port"] == 12345
    node_report_state(event={"node": head.pk, "status": protocol.NODE_COMPLETED, "exit_code": 0})
    job.refresh_from_db()
    worker.refresh_from_db()
    assert (job.status, job.status_reason) == (Job.Status.COMPLETED, "the Ray driver exited 0")
    assert worker.status == JobNode.Status.RUNNING  # until its supervisor reports the stop it was sent
    node_report_state(event={"node": worker.pk, "status": protocol.NODE_STOPPED, "reason": "stop requested"})
    job.refresh_from_db()
    assert job.status == Job.Status.COMPLETED


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("policy,status", [(None, Job.Status.FAILED), ("tolerate", Job.Status.RUNNING)])
def test_a_lost_ray_worker_fails_the_job_unless_tolerated(owner, policy, status):
    job, (head, worker) = ray_job(owner, **({"ray_worker_loss": policy} if policy else {}))
    node_report_state(event={"node": worker.pk, "status": protocol.NODE_FAILED, "exit_code": 1,
                             "reason": "node rank 1: Ray exited with code 1"})
    job.refresh_from_db()
    assert job.status == status

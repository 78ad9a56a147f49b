"""A Ray node's ports in GET /api/jobs/{id}: its nodes' progress.ray is what its `running` report said
(JobNode.progress["ray"]), each field read defensively; null for every other node."""

from __future__ import annotations

import pytest
from factories import make_node
from torchyard import protocol
from torchyard_server.jobs.control.metrics import job_record_progress
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode

PORTS = {"node_manager": 20001, "object_manager": 20002, "dashboard_agent_listen": 20003,
         "dashboard_agent_grpc": 20004, "metrics_export": 20005, "runtime_env_agent": 20006,
         "dashboard": 20007, "min_worker": 21000, "max_worker": 21063}
HEAD = {"head": True, "address": "10.0.0.1", "gcs": "10.0.0.1:6379", "ports": PORTS, "temp_dir": "/tmp/ty-ray-5",
        "object_store_bytes": 1_200_000_000, "num_cpus": 4, "num_gpus": 0, "dashboard_port": 20007}


def make_job(owner, framework: str = "ray", nodes: int = 2) -> tuple[Job, list[JobNode]]:
    launcher = "ray" if framework == "ray" else "torchrun"
    job = Job.objects.create(name="r", owner=owner, status=Job.Status.RUNNING, attempt=0, world_size=nodes,
                             spec={"framework": framework, "distributed": {"launcher": launcher}})
    made = [make_node(job, node_rank=r, status=JobNode.Status.LAUNCHING)
            for r in range(nodes)]
    return job, made


def progress_of(api, job: Job) -> dict[int, dict]:
    answer = api.get(f"/api/jobs/{job.pk}")
    assert answer.status_code == 200, answer.content
    return {n["node_rank"]: n["progress"] for n in answer.json()["nodes"]}


@pytest.mark.django_db(transaction=True)
def test_a_ray_nodes_running_report_gives_its_ports_in_the_job_detail(api, owner):
    job, (head, worker) = make_job(owner)
    assert progress_of(api, job)[0]["ray"] is None  # before its report
    worker_ray = {**HEAD, "head": False, "address": "10.0.0.2", "ports": {k: v for k, v in PORTS.items()
                                                                          if k != "dashboard"}}
    del worker_ray["dashboard_port"]
    node_report_state(event={"node": head.pk, "status": protocol.NODE_RUNNING, "pid": 5, "ray": HEAD})
    node_report_state(event={"node": worker.pk, "status": protocol.NODE_RUNNING, "pid": 6, "ray": worker_ray})
    progress = progress_of(api, job)
    assert progress[0]["ray"] == HEAD
    assert progress[1]["ray"] == {**worker_ray, "dashboard_port": None}
    assert progress[0]["step"] is None  # the other reported fields are still there


@pytest.mark.django_db
def test_a_node_of_another_job_has_no_ray(api, owner):
    job, _ = make_job(owner, framework="pytorch", nodes=1)
    JobNode.objects.filter(job=job).update(progress={"step": 3, "loss": 1.5})
    assert progress_of(api, job)[0] == {"step": 3, "loss": 1.5, "throughput": None, "ray": None}


@pytest.mark.django_db
@pytest.mark.parametrize("stored,shown", [
    ("not an object", None),
    ([1, 2], None),
    ({}, {"head": None, "address": None, "gcs": None, "ports": {}, "temp_dir": None, "object_store_bytes": None,
          "num_cpus": None, "num_gpus": None, "dashboard_port": None}),
    ({"head": "yes", "address": 7, "gcs": ["h", 1], "ports": {"node_manager": "20001", "object_manager": 0,
                                                              "raylet": True, "metrics_export": 70000, "x": 20009},
      "temp_dir": None, "object_store_bytes": "1 GB", "num_cpus": "4", "num_gpus": 1.0, "dashboard_port": {}},
     {"head": None, "address": None, "gcs": None, "ports": {"x": 20009}, "temp_dir": None, "object_store_bytes": None,
      "num_cpus": None, "num_gpus": 1, "dashboard_port": None}),
    ({**HEAD, "ports": "20001-20007"}, {**HEAD, "ports": {}}),
])
def test_a_nodes_bad_ray_report_never_breaks_the_job_page(api, owner, stored, shown):
    job, _ = make_job(owner, nodes=1)
    JobNode.objects.filter(job=job).update(progress={"step": 1, "ray": stored})
    assert progress_of(api, job)[0]["ray"] == shown


@pytest.mark.django_db(transaction=True)
def test_a_ray_head_that_reports_metrics_keeps_its_dashboard_port(api, owner):
    """A node's progress has two writers, its `running` report (the Ray ports) and the metric fold
    (step, loss, throughput); each merges into what the other wrote. The fold used to replace the
    whole dict: once the driver called sdk.report, the job's Ray dashboard answered 404."""
    job, (head, _) = make_job(owner)
    node_report_state(event={"node": head.pk, "status": protocol.NODE_RUNNING, "pid": 5, "ray": HEAD})
    job_record_progress(job_id=job.pk, metrics=[
        {"node": head.pk, "rank": 0, "attempt": 0, "step": 3, "loss": 2.5},
        {"node": head.pk, "rank": 0, "attempt": 0, "step": 4, "loss": 2.25, "throughput": 9.0},
    ])
    assert JobNode.objects.get(pk=head.pk).progress == {"ray": HEAD, "step": 4, "loss": 2.25, "throughput": 9.0}
    assert progress_of(api, job)[0]["ray"]["dashboard_port"] == 20007
    # And the other way round: a report after metrics keeps them.
    node_report_state(event={"node": head.pk, "status": protocol.NODE_RUNNING, "pid": 5, "ray": HEAD})
    assert JobNode.objects.get(pk=head.pk).progress["step"] == 4

"""GPU-hours (usage app): every node's GPUs and processes counted from its running to its end, per
project, user and machine; `GET /api/usage` with buckets for charts, and the /metrics counters. The
ledger outlives the jobs it counts."""

from __future__ import annotations

import datetime as dt
import time

import pytest
from clients import signed_in
from factories import bring_online
from prometheus_client.parser import text_string_to_metric_families
from torchyard import protocol
from torchyard_server.jobs.control.queue_pass import queue_schedule
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project
from torchyard_server.usage.models import NodeUsage

pytestmark = pytest.mark.django_db
UTC = dt.UTC


def gpu_job(client, name: str, gpus: int, project: str = "default") -> int:
    spec = {"name": name, "entrypoint": "examples/mlp_ddp.py", "project": project,
            "resources": {"nodes": 1, "procs_per_node": gpus, "gpus_per_node": gpus}}
    response = client.post("/api/jobs", spec, format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def report(job_id: int, status: str) -> None:
    for node in JobNode.objects.filter(job_id=job_id):
        node_report_state(event={"node": node.pk, "status": status, "pid": 1})


def lifetime(job_id: int) -> tuple[float, int, int]:
    """Seconds from the node's running to its end, its GPUs and processes (one node per job here)."""
    node = JobNode.objects.get(job_id=job_id)
    return (node.finished_at - node.started_at).total_seconds(), len(node.gpus), node.nproc


def test_gpu_hours_of_two_projects_match_their_nodes_lifetimes(staff_api, owner, teammate):
    bring_online("gpu-4", gpus=[{"index": i, "name": "A100", "memory_mb": 40_960} for i in range(4)])
    vision = Project.objects.create(name="vision")
    Membership.objects.create(project=vision, user=teammate, role=Membership.Role.MEMBER)
    big = gpu_job(signed_in(teammate), "big", 2, "vision")
    small = gpu_job(staff_api, "small", 1)
    queue_schedule()
    report(big, protocol.NODE_RUNNING)
    report(small, protocol.NODE_RUNNING)
    time.sleep(0.6)
    report(small, protocol.NODE_COMPLETED)
    time.sleep(0.6)
    report(big, protocol.NODE_COMPLETED)
    (big_s, big_gpus, big_procs), (small_s, small_gpus, _) = lifetime(big), lifetime(small)
    assert (big_gpus, big_procs, small_gpus) == (2, 2, 1) and big_s > small_s > 0.5

    totals = {t["key"]: t for t in staff_api.get("/api/usage", {"by": "project", "since": "1h"}).json()["totals"]}
    assert totals["vision"]["gpu_seconds"] == pytest.approx(2 * big_s, abs=1.0)
    assert totals["vision"]["process_seconds"] == pytest.approx(2 * big_s, abs=1.0)
    assert totals["default"]["gpu_seconds"] == pytest.approx(small_s, abs=1.0)
    # Exactly the nodes' lifetimes, in fact: the ledger takes its times from the transitions.
    assert totals["vision"]["gpu_seconds"] == pytest.approx(2 * big_s, abs=1e-3)
    assert totals["vision"]["gpu_hours"] == pytest.approx(2 * big_s / 3600, abs=1e-5)
    assert [t["key"] for t in staff_api.get("/api/usage", {"since": "1h"}).json()["totals"]] == ["vision", "default"]
    by_user = {t["key"]: t["gpu_seconds"] for t in staff_api.get("/api/usage", {"by": "user"}).json()["totals"]}
    assert by_user == {"bob": pytest.approx(2 * big_s, abs=1e-3), "sam": pytest.approx(small_s, abs=1e-3)}
    by_machine = staff_api.get("/api/usage", {"by": "machine"}).json()["totals"]
    assert [(t["key"], t["nodes"]) for t in by_machine] == [("gpu-4", 2)]

    # Series for a chart: one per project, aligned with the buckets, adding up to the totals.
    charted = staff_api.get("/api/usage", {"since": "3h", "bucket": "hour"}).json()
    assert len(charted["buckets"]) in (3, 4)
    series = {s["key"]: s for s in charted["series"]}
    assert sum(series["vision"]["gpu_hours"]) == pytest.approx(2 * big_s / 3600, abs=1e-5)

    # bob sees his projects' usage: vision and default (everyone's first project), not a third one.
    secret = Project.objects.create(name="secret")
    NodeUsage.objects.create(node_id=10**9, job_id=10**9, username="x", project=secret, project_name="secret",
                             machine_name="gpu-4", gpus=8, processes=8, started_at=dt.datetime.now(UTC))
    assert {t["key"] for t in signed_in(teammate).get("/api/usage").json()["totals"]} == {"vision", "default"}
    assert "secret" in {t["key"] for t in staff_api.get("/api/usage").json()["totals"]}

    # The ledger outlives the job: deleting it changes nothing that was used.
    assert staff_api.delete(f"/api/jobs/{small}").status_code == 204
    assert not Job.objects.filter(pk=small).exists()
    again = {t["key"]: t for t in staff_api.get("/api/usage", {"since": "1h"}).json()["totals"]}
    assert again["default"]["gpu_seconds"] == totals["default"]["gpu_seconds"]

    # The /metrics counters say the same, per project (a running node counts up to now).
    response = staff_api.get("/metrics")
    samples = {(s.name, s.labels.get("project")): s.value
               for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    assert samples[("torchyard_gpu_seconds_total", "vision")] == pytest.approx(2 * big_s, abs=1e-3)
    assert samples[("torchyard_process_seconds_total", "default")] == pytest.approx(small_s, abs=1e-3)
    assert samples[("torchyard_gpu_seconds_total", "secret")] >= 0


def test_buckets_split_a_node_at_their_edges_and_the_window_cuts_it(staff_api):
    def at(hour: int, minute: int = 0) -> dt.datetime:
        return dt.datetime(2025, 3, 4, hour, minute, tzinfo=UTC)

    NodeUsage.objects.create(node_id=1, job_id=1, username="alice", project_name="default", machine_name="m",
                             gpus=2, processes=4, started_at=at(10, 30), ended_at=at(12, 15),
                             gpu_seconds=2 * 6300, process_seconds=4 * 6300)
    NodeUsage.objects.create(node_id=2, job_id=2, username="alice", project_name="default", machine_name="m",
                             gpus=1, processes=1, started_at=at(8), ended_at=at(9))  # before the window
    answer = staff_api.get("/api/usage", {"since": "2025-03-04T10:00:00Z", "until": "2025-03-04T13:00:00Z",
                                    "bucket": "hour"}).json()
    assert answer["buckets"] == ["2025-03-04T10:00:00Z", "2025-03-04T11:00:00Z", "2025-03-04T12:00:00Z"]
    assert answer["series"] == [{"key": "default", "gpu_hours": [1.0, 2.0, 0.5], "process_hours": [2.0, 4.0, 1.0]}]
    assert answer["totals"][0]["gpu_hours"] == 3.5 and answer["totals"][0]["nodes"] == 1
    cut = staff_api.get("/api/usage", {"since": "2025-03-04T11:00:00Z", "until": "2025-03-04T12:00:00Z"}).json()
    assert cut["totals"][0]["gpu_hours"] == 2.0 and "series" not in cut
    by_day = staff_api.get("/api/usage", {"since": "2025-03-04", "until": "2025-03-05", "bucket": "day"}).json()
    assert by_day["series"][0]["gpu_hours"] == [4.5]


@pytest.mark.parametrize("params, field", [
    ({"by": "team"}, "by"), ({"bucket": "week"}, "bucket"), ({"since": "yesterday"}, "since"),
    ({"since": "2025-03-05", "until": "2025-03-04"}, "since"), ({"since": "2000-01-01", "bucket": "hour"}, "bucket"),
])
def test_bad_queries_are_400s_naming_the_parameter(api, params, field):
    response = api.get("/api/usage", params)
    assert response.status_code == 400 and field in response.json()

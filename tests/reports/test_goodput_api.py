"""GET /api/jobs/{id}/goodput and GET /api/usage/goodput: the split of tests/reports/history.py's job,
read from its event rows, nodes and checkpoints as the ingest stored them; the goodput ledger that
keeps ended jobs (and the /metrics counters it answers); the roll-ups per project, user and machine
with GPU-hours and cost; who sees what."""

from __future__ import annotations

import datetime as dt

import pytest
from clients import signed_in
from django.utils import timezone
from factories import make_job, make_node
from prometheus_client.parser import text_string_to_metric_families
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.models import Job
from torchyard_server.machines.models import Machine
from torchyard_server.projects.models import Membership, Project
from torchyard_server.reports.goodput import CATEGORIES
from torchyard_server.streaming.models import JobEvent
from torchyard_server.usage.models import JobGoodput, NodeUsage

from reports import history

pytestmark = pytest.mark.django_db
UTC = dt.UTC
# Each attempt's node: on which machine, and from when to when it ran (the usage ledger's row).
NODE_RUNS = {0: ("m0", 150, 300), 1: ("m1", 335, 390), 2: ("m1", 503, 556)}


def at(base: float, second: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(base + second, tz=UTC)


def write_history(owner, *, base: float, project: Project | None = None, name: str = "scripted") -> Job:
    """history.py's job as rows: the job, a node per attempt on machines m0 and m1 (two GPUs each, at
    2 an hour), every event as ingest stores it (metric events of two ranks, rank 1 a little behind),
    its manifests and its nodes' usage."""
    job = make_job(owner=owner, name=name, status=Job.Status.COMPLETED, attempt=2, restarts=1, world_size=2,
                   **({"project": project} if project else {}))
    Job.objects.filter(pk=job.pk).update(created_at=at(base, 0), started_at=at(base, 150),
                                         finished_at=at(base, history.END))
    job.refresh_from_db()
    machines = {}
    for machine_name in ("m0", "m1"):
        machines[machine_name] = Machine.objects.get_or_create(name=machine_name, defaults={
            "host": f"10.0.0.{len(machines) + 1}", "token_hash": machine_name, "price_per_gpu_hour": 2.0,
            "capabilities": {"gpu_count": 2, "cpu_count": 8}})[0]
    nodes = {a: make_node(job, attempt=a, nproc=2, machine=machines[m], gpus=[0, 1]) for a, (m, _, _) in NODE_RUNS.items()}
    rows: list[JobEvent] = []

    def event(second: float, kind: str, attempt: int, payload: dict, node: int | None = None, rank=None) -> None:
        rows.append(JobEvent(job=job, node=nodes[node] if node is not None else None, attempt=attempt, rank=rank,
                             node_rank=0 if node is not None else None, type=kind, ts=at(base, second),
                             payload=payload, dedupe_key=f"h{job.pk}:{len(rows)}"))

    for second, status, attempt, reason in history.JOB:
        event(second, "state", attempt, {"scope": "job", "status": status, "previous": None, "reason": reason})
    for second, node, attempt, status, reason in history.NODES:
        event(second, "state", attempt, {"scope": "node", "status": status, "reason": reason}, node=node)
    for second, node, attempt, line in history.LINES:
        event(second, "log", attempt, {"stream": "stdout", "line": line, "source": "pip" if "Collecting" in line
                                       else "prepare"}, node=node)
    for second, attempt, step in history.STEPS:
        for rank, late in ((0, 0.0), (1, 0.25)):
            event(second + late, "metric", attempt, {"step": step, "loss": 1.0 / step}, node=attempt, rank=rank)
        event(second, "log", attempt, {"stream": "stdout", "line": f"step {step}", "source": "worker"}, node=attempt,
              rank=0)
    JobEvent.objects.bulk_create(rows)
    for second, attempt, step, uri, blocking in history.CHECKPOINTS:
        CheckpointManifest.objects.create(job=job, attempt=attempt, step=step, uri=uri, committed_at=at(base, second),
                                          blocking_seconds=blocking, background_seconds=None)
    for attempt, (machine_name, start, end) in NODE_RUNS.items():
        NodeUsage.objects.create(node_id=nodes[attempt].pk, job_id=job.pk, attempt=attempt, user=owner,
                                 username=owner.username, project=job.project, project_name=job.project.name,
                                 machine=machines[machine_name], machine_name=machine_name, gpus=2, processes=2,
                                 started_at=at(base, start), ended_at=at(base, end),
                                 gpu_seconds=2 * (end - start), process_seconds=2 * (end - start))
    return job


@pytest.fixture
def scripted(owner):
    """The job, ended 444 s ago (settled: its events are all in)."""
    return write_history(owner, base=timezone.now().timestamp() - 1000)


def rounded(parts: dict[str, float]) -> dict[str, float]:
    return {category: seconds for category, seconds in parts.items() if seconds}


def test_a_jobs_split_comes_from_the_events_it_streamed(api, scripted):
    body = api.get(f"/api/jobs/{scripted.pk}/goodput").json()
    assert set(body) == {"job", "status", "live", "started_at", "ended_at", "wall_seconds", "goodput", "parts",
                         "attempts"}
    assert (body["job"], body["status"], body["live"], body["wall_seconds"]) == (scripted.pk, "completed", False, 556)
    assert list(body["parts"]) == list(CATEGORIES)
    assert rounded(body["parts"]) == history.EXPECTED
    assert sum(body["parts"].values()) == pytest.approx(body["wall_seconds"], rel=0.01)
    assert body["goodput"] == pytest.approx(150 / 556, abs=1e-6)
    assert [a["attempt"] for a in body["attempts"]] == [0, 1, 2]
    for attempt in body["attempts"]:
        assert rounded(attempt["parts"]) == history.EXPECTED_ATTEMPTS[attempt["attempt"]]
        start, end = history.ATTEMPT_SPANS[attempt["attempt"]]
        assert attempt["wall_seconds"] == end - start
        assert sum(attempt["parts"].values()) == pytest.approx(attempt["wall_seconds"], rel=0.01)
    assert body["attempts"][1]["goodput"] == pytest.approx(50 / 170, abs=1e-6)


def test_only_who_may_see_the_job_sees_its_goodput(scripted, viewer, outsider, anonymous):
    assert signed_in(viewer).get(f"/api/jobs/{scripted.pk}/goodput").status_code == 200
    assert signed_in(outsider).get(f"/api/jobs/{scripted.pk}/goodput").status_code == 404
    assert signed_in(outsider).get("/api/jobs/999999/goodput").status_code == 404
    assert anonymous.get(f"/api/jobs/{scripted.pk}/goodput").status_code in (401, 403)


def metric_samples(client) -> dict[tuple[str, str], float]:
    text = client.get("/metrics").content.decode()
    return {(s.labels["project"], s.labels["category"]): s.value for family in text_string_to_metric_families(text)
            if family.name == "torchyard_goodput_seconds" for s in family.samples if s.name.endswith("_total")}


def test_an_ended_job_is_kept_in_the_ledger_which_outlives_it_and_feeds_the_metrics(staff_api, owner, scripted):
    live = make_job(owner=owner, name="live", status=Job.Status.RUNNING)
    samples = metric_samples(staff_api)  # the scrape folds the ended job in
    assert {c: samples[("default", c)] for c in CATEGORIES if samples[("default", c)]} == history.EXPECTED
    assert JobGoodput.objects.count() == 1  # the live job is not in the ledger
    entry = JobGoodput.objects.get(job_id=scripted.pk)
    assert (entry.project_name, entry.username, entry.wall_seconds) == ("default", "alice", 556)
    assert [(a["attempt"], a["machines"]) for a in entry.attempts] == [(0, ["m0"]), (1, ["m1"]), (2, ["m1"])]

    Job.objects.filter(pk=scripted.pk).delete()  # purged: its events, nodes and manifests go with it
    assert metric_samples(staff_api)[("default", "training")] == 150
    rollup = staff_api.get("/api/usage/goodput", {"since": "1d"}).json()
    assert rollup["overall"]["jobs"] == 2 and rollup["rows"][0]["parts"]["training"] >= 150
    assert live.pk not in JobGoodput.objects.values_list("job_id", flat=True)


def test_rollups_by_project_user_and_machine_count_gpu_hours_and_their_cost(api, owner, scripted):
    by_project = api.get("/api/usage/goodput").json()
    assert set(by_project) == {"by", "since", "until", "rows", "overall"}
    (row,) = by_project["rows"]
    assert set(row) == {"key", "jobs", "wall_seconds", "goodput", "parts", "gpu_hours", "productive_gpu_hours", "cost",
                        "wasted_cost"}
    assert (row["key"], row["jobs"], row["wall_seconds"]) == ("default", 1, 556)
    assert rounded(row["parts"]) == history.EXPECTED
    # Two GPUs from each node's start to its end: 150 + 55 + 53 s; training 50 s of each.
    assert row["gpu_hours"] == pytest.approx(2 * (150 + 55 + 53) / 3600, abs=1e-6)
    assert row["productive_gpu_hours"] == pytest.approx(2 * 150 / 3600, abs=1e-6)
    assert row["cost"] == pytest.approx(2.0 * 2 * 258 / 3600, abs=1e-4)
    assert row["wasted_cost"] == pytest.approx(2.0 * 2 * (258 - 150) / 3600, abs=1e-4)
    assert by_project["overall"] == dict(row, key="all")

    (user,) = api.get("/api/usage/goodput", {"by": "user"}).json()["rows"]
    assert (user["key"], user["wall_seconds"], user["cost"]) == ("alice", 556, row["cost"])

    by_machine = {r["key"]: r for r in api.get("/api/usage/goodput", {"by": "machine"}).json()["rows"]}
    assert list(by_machine) == ["m0", "m1"]  # most wall time first
    # Attempt 0 on m0, attempts 1 and 2 on m1, without their waits in the queue.
    assert (by_machine["m0"]["wall_seconds"], by_machine["m1"]["wall_seconds"]) == (331 - 101, 170 - 114 + 55)
    assert by_machine["m0"]["parts"]["queued"] == 0 and by_machine["m1"]["parts"]["preempted"] == 0
    assert by_machine["m1"]["gpu_hours"] == pytest.approx(2 * (55 + 53) / 3600, abs=1e-6)
    assert by_machine["m0"]["goodput"] == pytest.approx(50 / 230, abs=1e-6)

    Machine.objects.update(price_per_gpu_hour=None)
    assert api.get("/api/usage/goodput").json()["rows"][0]["cost"] is None  # no price, no cost


def test_rollups_count_only_the_projects_a_user_sees_and_the_live_jobs_up_to_now(owner, teammate, outsider,
                                                                                 scripted):
    lab = Project.objects.create(name="lab")
    Membership.objects.create(project=lab, user=teammate, role=Membership.Role.MEMBER)
    running = make_job(owner=teammate, name="running", project=lab, status=Job.Status.RUNNING)
    Job.objects.filter(pk=running.pk).update(created_at=timezone.now() - dt.timedelta(seconds=40),
                                             started_at=timezone.now() - dt.timedelta(seconds=30))
    bob = {r["key"]: r for r in signed_in(teammate).get("/api/usage/goodput", {"since": "2h"}).json()["rows"]}
    assert set(bob) == {"default", "lab"}  # bob is in both
    assert bob["lab"]["jobs"] == 1 and bob["lab"]["parts"]["queued"] == pytest.approx(10, abs=1)
    assert bob["lab"]["parts"]["training"] == pytest.approx(30, abs=1)  # a script without steps trains while running
    assert [r["key"] for r in signed_in(owner).get("/api/usage/goodput").json()["rows"]] == ["default"]
    nothing = signed_in(outsider).get("/api/usage/goodput").json()
    assert nothing["rows"] == [] and nothing["overall"]["jobs"] == 0 and nothing["overall"]["goodput"] == 0
    only_lab = signed_in(teammate).get("/api/usage/goodput", {"project": "lab", "by": "user"}).json()["rows"]
    assert [r["key"] for r in only_lab] == ["bob"]


@pytest.mark.parametrize(("params", "field"), [({"by": "team"}, "by"), ({"since": "yesterday"}, "since"),
                                               ({"since": "0m"}, "since"), ({"since": "999999w"}, "since")])
def test_bad_rollup_queries_are_400s_naming_the_parameter(api, params, field):
    response = api.get("/api/usage/goodput", params)
    assert response.status_code == 400 and field in response.json()


def test_staff_price_a_machine_and_everyone_reads_the_price(staff_api, api):
    machine = Machine.objects.create(name="cpu-1", host="10.0.0.9", token_hash="t", capabilities={"cpu_count": 16})
    changed = staff_api.patch(f"/api/machines/{machine.pk}", {"price_per_machine_hour": 0.8}, format="json")
    assert changed.status_code == 200, changed.json()
    assert (changed.json()["price_per_machine_hour"], changed.json()["price_per_gpu_hour"]) == (0.8, None)
    assert api.get("/api/machines").json()[0]["price_per_machine_hour"] == 0.8
    assert api.patch(f"/api/machines/{machine.pk}", {"price_per_gpu_hour": 1}, format="json").status_code == 403
    assert staff_api.patch(f"/api/machines/{machine.pk}", {"price_per_gpu_hour": -1}, format="json").status_code == 400
    cleared = staff_api.patch(f"/api/machines/{machine.pk}", {"price_per_machine_hour": None}, format="json")
    assert cleared.json()["price_per_machine_hour"] is None

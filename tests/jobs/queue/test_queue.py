"""The one queue (jobs/placement/queue.py): order by priority then submission, reasons in words, EASY
backfill, priorities capped per project and changed by an audited PATCH, project quotas with and
without borrowing, enforced under the placement lock. Simulated machines (bring_online); a queue pass
is `queue_schedule()`, as the controller runs it; nodes report through `node_report_state`."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from clients import signed_in
from django.db import connection
from django.utils import timezone
from factories import bring_online
from torchyard import protocol
from torchyard_server.audit.models import AuditEntry
from torchyard_server.jobs.control.queue_pass import jobs_enforce_time_limits, queue_schedule
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project

pytestmark = pytest.mark.django_db
J = Job.Status


def gpus(count: int, memory_mb: int = 40_960) -> list[dict]:
    return [{"index": i, "name": "A100", "memory_mb": memory_mb} for i in range(count)]


def spec(name: str, *, gpus_per_node: int = 1, nodes: int = 1, **fields) -> dict:
    return {"name": name, "entrypoint": "examples/mlp_ddp.py",
            "resources": {"nodes": nodes, "procs_per_node": 1, "gpus_per_node": gpus_per_node},
            "distributed": {"backend": "gloo"}, **fields}


def submit(client, name: str, **fields) -> int:
    response = client.post("/api/jobs", spec(name, **fields), format="json")
    assert response.status_code == 201, response.json()
    return response.json()["id"]


def queue(client, **params) -> list[dict]:
    response = client.get("/api/queue", params)
    assert response.status_code == 200, response.json()
    return response.json()["jobs"]


def status(job_id: int) -> str:
    return Job.objects.get(pk=job_id).status


def started(job_ids: list[int]) -> list[int]:
    return [j for j in job_ids if status(j) == J.DISPATCHING]


def run(job_id: int, *, eta: float | None = None) -> None:
    for node in JobNode.objects.filter(job_id=job_id):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_RUNNING, "pid": 1})
    if eta is not None:
        job = Job.objects.get(pk=job_id)
        Job.objects.filter(pk=job_id).update(progress={**job.progress, "eta_seconds": eta})


def finish(job_id: int) -> None:
    for node in JobNode.objects.filter(job_id=job_id, status=JobNode.Status.RUNNING):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_COMPLETED})
    assert status(job_id) == J.COMPLETED


@pytest.fixture
def vision(owner, teammate) -> Project:
    """A second project: bob (teammate) a member; alice (owner) is not in it."""
    project = Project.objects.create(name="vision")
    Membership.objects.create(project=project, user=teammate, role=Membership.Role.MEMBER)
    return project


# --- order -----------------------------------------------------------------------------------------
def test_five_jobs_of_equal_priority_start_in_the_order_they_were_submitted(api):
    bring_online("one-gpu", gpus=gpus(1))
    jobs = [submit(api, f"fifo-{i}") for i in range(5)]
    assert [(e["id"], e["position"]) for e in queue(api)] == [(j, i) for i, j in enumerate(jobs, 1)]
    order = []
    for _ in jobs:
        queue_schedule()
        now_running = started(jobs)
        assert len(now_running) == 1, "one GPU: one job at a time"
        order += now_running
        run(now_running[0])
        finish(now_running[0])
    assert order == jobs


def test_a_higher_priority_goes_first_and_names_are_points_on_one_line(api):
    bring_online("one-gpu", gpus=gpus(1))
    blocker = submit(api, "blocker")
    queue_schedule()
    run(blocker)
    low, normal, high, seven = (submit(api, "low", priority="low"), submit(api, "normal"),
                                submit(api, "high", priority="high"), submit(api, "seven", priority=7))
    entries = queue(api)
    assert [(e["id"], e["priority"]) for e in entries] == [(high, 10), (seven, 7), (normal, 0), (low, -10)]
    assert Job.objects.get(pk=seven).spec["priority"] == 7
    order = []
    for _ in range(4):
        finish(blocker if not order else order[-1])
        queue_schedule()
        order += started([low, normal, high, seven])
        run(order[-1])
    assert order == [high, seven, normal, low]


# --- reasons ---------------------------------------------------------------------------------------
def test_each_waiting_job_says_why_in_words_and_the_reason_is_kept_on_the_job(api, vision, teammate):
    bring_online("two-gpus", gpus=gpus(2))
    first = submit(api, "takes-both", gpus_per_node=2)
    head = submit(api, "needs-two", gpus_per_node=2)
    behind = submit(api, "needs-one")
    preview = {e["id"]: e for e in queue(api)}
    assert preview[first]["reason"] == "starting" and preview[first]["blocked_by"] is None
    queue_schedule()
    assert status(first) == J.DISPATCHING
    entries = {e["id"]: e for e in queue(api)}
    assert list(entries) == [head, behind]
    assert entries[head]["head"] and entries[head]["blocked_by"] == "resources"
    assert entries[head]["reason"].startswith("waiting for 1 machines with free GPUs: 0 now (two-gpus: 0 GPUs free")
    # The running job has neither an ETA nor a time limit: the head's start is unknown.
    assert "first in line; the jobs it waits for have no ETA or time limit" in entries[head]["reason"]
    assert entries[head]["expected_start"] is None and entries[head]["position"] == 1
    assert entries[behind]["reason"].endswith(f"behind #{head}") and not entries[behind]["head"]
    assert Job.objects.get(pk=head).status_reason == entries[head]["reason"]
    assert (entries[head]["gpus"], entries[head]["processes"]) == (2, 1)
    # Only a project's jobs, each with its place in the whole queue.
    bobs = submit(signed_in(teammate), "bobs", project="vision")
    queue_schedule()
    visible = signed_in(teammate).get("/api/queue", {"project": "vision"}).json()
    assert [(e["id"], e["position"]) for e in visible["jobs"]] == [(bobs, 3)] and visible["total"] == 3


def test_a_job_that_fits_but_would_delay_the_head_waits_and_one_that_cannot_starts(api):
    """EASY backfill: the head (4 GPUs on one machine) is expected to start when the running job's
    ETA runs out; a job with a time limit inside that window starts on the head's machine, a job
    without one only where the head will not go."""
    big = bring_online("gpu-4", gpus=gpus(4))[0]
    bring_online("gpu-1", gpus=gpus(1))
    running = submit(api, "running", gpus_per_node=2)
    queue_schedule()
    run(running, eta=600)
    head = submit(api, "head", gpus_per_node=4)
    no_limit_1 = submit(api, "no-limit-1")
    no_limit_2 = submit(api, "no-limit-2")
    short = submit(api, "short", time_limit="5m")
    before = {e["id"]: e for e in queue(api)}
    assert before[head]["head"] and before[head]["expected_start"] is not None
    assert f"first in line, expected to start in about 10 min (when #{running} ends)" in before[head]["reason"]

    queue_schedule()
    assert status(head) == J.QUEUED
    # The first goes where the head will not (the 1-GPU machine); the second would take a GPU of the
    # head's machine for as long as it likes.
    assert status(no_limit_1) == J.DISPATCHING
    assert JobNode.objects.get(job_id=no_limit_1).machine_name == "gpu-1"
    assert status(no_limit_2) == J.QUEUED
    assert status(short) == J.DISPATCHING
    assert JobNode.objects.get(job_id=short).machine_id == big.pk
    after = {e["id"]: e for e in queue(api)}
    moved = dt.datetime.fromisoformat(after[head]["expected_start"]) - dt.datetime.fromisoformat(
        before[head]["expected_start"])
    assert abs(moved.total_seconds()) <= 60, "backfill never delays the head (its ETA, to the minute)"
    assert after[no_limit_2]["blocked_by"] == "head"
    assert after[no_limit_2]["reason"].startswith(f"fits now, but would delay #{head} (first in line): it would take "
                                                  f"room #{head} needs in about 10 min, and it has no time limit")
    events = Job.objects.get(pk=short).status_reason
    assert events.startswith("launching 1 node(s)")


def test_an_unknown_eta_keeps_backfill_off_the_heads_machines(api):
    bring_online("gpu-2", gpus=gpus(2))
    running = submit(api, "running")
    queue_schedule()
    run(running)  # no ETA, no time limit
    head = submit(api, "head", gpus_per_node=2)
    short = submit(api, "short", time_limit=60)
    queue_schedule()
    assert status(short) == J.QUEUED  # even a short job: when the head may start is unknown
    entry = {e["id"]: e for e in queue(api)}[short]
    assert entry["reason"].endswith(f"it would take room #{head} needs, and when that frees up is unknown")


# --- priorities ------------------------------------------------------------------------------------
def test_a_priority_above_the_projects_ceiling_is_a_400_naming_it(staff_api, vision, teammate):
    bring_online("one-gpu", gpus=gpus(1))
    bob = signed_in(teammate)
    assert submit(bob, "high-is-fine-by-default", project="vision", priority="high")
    Project.objects.filter(pk=vision.pk).update(priority_ceiling=0)
    refused = bob.post("/api/jobs", spec("urgent", project="vision", priority="high"), format="json")
    assert refused.status_code == 400
    assert refused.json()["priority"] == [
        "priority 10 (high) is above project vision's ceiling of 0 (normal); ask one of its admins to raise it "
        "(PATCH /api/projects/vision)."]
    assert bob.post("/api/jobs", spec("bad", project="vision", priority="urgent"), format="json").json()[
        "priority"] == ["'urgent' is not a priority: low, normal, high or an integer from -100 to 100."]
    assert bob.post("/api/jobs", spec("bad", project="vision", priority=101), format="json").status_code == 400
    assert submit(staff_api, "staff-are-not-capped", project="vision", priority="high")


def test_admins_set_the_ceiling_and_only_staff_set_quotas(staff_api, vision, teammate, django_user_model):
    carol = django_user_model.objects.create_user("carol")
    Membership.objects.create(project=vision, user=carol, role=Membership.Role.ADMIN)
    admin = signed_in(carol)
    changed = admin.patch("/api/projects/vision", {"priority_ceiling": "normal"}, format="json")
    assert changed.status_code == 200 and changed.json()["priority_ceiling"] == 0
    assert admin.patch("/api/projects/vision", {"priority_ceiling": 50}, format="json").status_code == 400
    assert admin.patch("/api/projects/vision", {"max_gpus": 64}, format="json").status_code == 403
    assert signed_in(teammate).patch("/api/projects/vision", {"priority_ceiling": 5}, format="json").status_code == 403
    quota = staff_api.patch("/api/projects/vision", {"max_gpus": 8, "max_processes": 32, "borrow": True}, format="json")
    assert quota.status_code == 200
    body = quota.json()
    assert (body["max_gpus"], body["max_processes"], body["borrow"], body["held"]) == (8, 32, True, {"gpus": 0, "processes": 0})
    entry = AuditEntry.objects.filter(action="project.update", actor_label="sam").get()
    assert entry.detail == {"changes": {"max_gpus": 8, "max_processes": 32, "borrow": True},
                            "previous": {"max_gpus": None, "max_processes": None, "borrow": False}}
    assert staff_api.patch("/api/projects/vision", {"max_gpus": -1}, format="json").status_code == 400


def test_changing_a_priority_is_audited_checked_and_reorders_the_queue(api, vision, teammate, django_user_model):
    bring_online("one-gpu", gpus=gpus(1))
    bob = signed_in(teammate)
    blocker = submit(bob, "blocker", project="vision")
    queue_schedule()
    first, second = submit(bob, "first", project="vision"), submit(bob, "second", project="vision")
    assert [e["id"] for e in queue(bob)] == [first, second]
    changed = bob.patch(f"/api/jobs/{second}", {"priority": "high"}, format="json")
    assert changed.status_code == 200 and changed.json()["priority"] == 10
    assert [e["id"] for e in queue(bob)] == [second, first]
    entry = AuditEntry.objects.get(action="job.priority_change")
    assert (entry.actor_label, entry.target_id, entry.project_id) == ("bob", str(second), vision.pk)
    assert entry.detail == {"priority": 10, "previous": 0, "status": "queued"}
    # Above the ceiling: 400; someone else's job as a plain member: 403; not in the project: 404.
    Project.objects.filter(pk=vision.pk).update(priority_ceiling=0)
    assert bob.patch(f"/api/jobs/{first}", {"priority": 5}, format="json").status_code == 400
    dave = django_user_model.objects.create_user("dave")
    Membership.objects.create(project=vision, user=dave, role=Membership.Role.MEMBER)
    assert signed_in(dave).patch(f"/api/jobs/{first}", {"priority": "low"}, format="json").status_code == 403
    outsider = django_user_model.objects.create_user("eve")
    Membership.objects.filter(user=outsider).delete()
    assert signed_in(outsider).patch(f"/api/jobs/{first}", {"priority": "low"}, format="json").status_code == 404
    # A finished job keeps the priority it ran with.
    run(blocker)
    finish(blocker)
    assert bob.patch(f"/api/jobs/{blocker}", {"priority": "low"}, format="json").status_code == 400
    assert AuditEntry.objects.filter(action="job.priority_change").count() == 1


# --- quotas ----------------------------------------------------------------------------------------
def test_a_project_at_its_quota_waits_while_others_use_the_rest(api, vision, teammate):
    bring_online("gpu-4", gpus=gpus(4))
    Project.objects.filter(pk=vision.pk).update(max_gpus=2)
    bob = signed_in(teammate)
    a, b, c = (submit(bob, name, project="vision") for name in ("a", "b", "c"))
    other = submit(api, "other-project")
    queue_schedule()
    assert [status(j) for j in (a, b, c, other)] == [J.DISPATCHING, J.DISPATCHING, J.QUEUED, J.DISPATCHING]
    entry = queue(bob)[0]
    assert (entry["id"], entry["blocked_by"]) == (c, "quota")
    assert entry["reason"] == "project vision is at its quota of 2 GPUs (2 held, 1 asked)"
    assert not Job.objects.filter(borrowing=True).exists()
    assert bob.get("/api/projects/vision").json()["held"] == {"gpus": 2, "processes": 2}
    # A job that could never start within the quota is refused at once.
    refused = bob.post("/api/jobs", spec("too-big", project="vision", gpus_per_node=3), format="json")
    assert refused.status_code == 400
    assert refused.json()["detail"] == "the job can never start: project vision has a quota of 2 GPUs (0 held, 3 asked)"
    # Processes count too.
    Project.objects.filter(pk=vision.pk).update(max_gpus=None, max_processes=2)
    queue_schedule()
    assert "project vision is at its quota of 2 processes (2 held, 1 asked)" in queue(bob)[0]["reason"]


def test_with_borrowing_a_project_past_its_quota_uses_idle_capacity_marked_borrowing(staff_api, vision, teammate):
    bring_online("gpu-3", gpus=gpus(3))
    Project.objects.filter(pk=vision.pk).update(max_gpus=1, borrow=True)
    bob = signed_in(teammate)
    within, beyond = submit(bob, "within", project="vision"), submit(bob, "beyond", project="vision")
    later = submit(staff_api, "later-but-within-its-own")
    late_beyond = submit(bob, "late-beyond", project="vision")
    # Before anything runs: the second of vision's jobs is past the quota, and waits for every job
    # within its quota to have had its turn.
    preview = {e["id"]: e for e in queue(staff_api)}
    assert preview[beyond]["borrowing"] and preview[beyond]["reason"].startswith("starting beyond project vision's")
    queue_schedule()
    assert [status(j) for j in (within, beyond, later, late_beyond)] == [J.DISPATCHING, J.DISPATCHING, J.DISPATCHING,
                                                                         J.QUEUED]
    assert list(Job.objects.filter(borrowing=True).values_list("pk", flat=True)) == [beyond]
    waiting = queue(staff_api)[0]
    assert (waiting["id"], waiting["blocked_by"], waiting["borrowing"]) == (late_beyond, "quota", True)
    assert waiting["reason"].startswith("waiting for 1 machines with free GPUs: 0 now")
    assert waiting["reason"].endswith("project vision is at its quota of 1 GPU (2 held, 1 asked): it may borrow "
                                      "idle capacity, when some fits it")
    # The job within the quota ends: the borrower is now within it, and is no longer marked.
    run(within)
    finish(within)
    queue_schedule()
    assert set(Job.objects.filter(borrowing=True).values_list("pk", flat=True)) == {late_beyond}
    assert not Job.objects.get(pk=beyond).borrowing


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent writers (PostgreSQL)")
def test_concurrent_submissions_and_schedulers_never_take_a_project_past_its_quota(owner, teammate):
    bring_online("gpu-8", gpus=gpus(8))
    vision = Project.objects.create(name="vision", max_gpus=3)
    Membership.objects.create(project=vision, user=teammate, role=Membership.Role.MEMBER)
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def submit_and_schedule(index: int) -> None:
        try:
            client = signed_in(teammate)
            barrier.wait()
            submit(client, f"racer-{index}", project="vision")
            queue_schedule()  # as eight controller threads would, each after its own submission
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=submit_and_schedule, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    queue_schedule()
    held = sum(len(gpus) for gpus in JobNode.objects.filter(job__project=vision).values_list("gpus", flat=True))
    assert held == 3
    assert Job.objects.filter(project=vision, status=J.DISPATCHING).count() == 3
    assert Job.objects.filter(project=vision, status=J.QUEUED).count() == 5


def test_a_job_past_its_time_limit_is_stopped(api):
    bring_online("one-gpu", gpus=gpus(1))
    job_id = submit(api, "limited", time_limit="1h30m")
    assert Job.objects.get(pk=job_id).spec["time_limit"] == 5400
    queue_schedule()
    run(job_id)
    assert jobs_enforce_time_limits() == []
    Job.objects.filter(pk=job_id).update(started_at=timezone.now() - dt.timedelta(hours=2))
    assert jobs_enforce_time_limits() == [job_id]
    job = Job.objects.get(pk=job_id)
    assert (job.status, job.status_reason) == (J.STOPPING, "time limit of 1h30m reached")
    assert api.post("/api/jobs", spec("bad", time_limit="soon"), format="json").status_code == 400

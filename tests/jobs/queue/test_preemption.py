"""Lossless preemption (jobs/placement/queue.py choose_victims, control/stop.py job_preempt): which running jobs a
head that cannot start preempts, in what order, never which; the victim's path preempting ->
preempted -> a new attempt that counts no restart; two passes at once never preempt twice.
Simulated machines; nodes report through `node_report_state` as the ingest loop would."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
from clients import signed_in
from django.db import connection
from django.utils import timezone
from factories import bring_online
from torchyard import protocol
from torchyard_server.checkpoints.models import CheckpointManifest
from torchyard_server.jobs.control.queue_pass import queue_schedule
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.stop import job_stop
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.projects.models import Membership, Project

from jobs.queue.test_queue import gpus, queue, run, spec, status, submit

pytestmark = pytest.mark.django_db
J = Job.Status


def yielded(job_id: int, step: int = 5) -> None:
    for node in JobNode.objects.filter(job_id=job_id, status=JobNode.Status.RUNNING):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_STOPPED, "yielded": True,
                                 "reason": f"node rank {node.node_rank}: yielded for preemption after its checkpoint "
                                           f"at step {step}"})


def started_running(api, name: str, **fields) -> int:
    job_id = submit(api, name, **fields)
    queue_schedule()
    assert status(job_id) == J.DISPATCHING, Job.objects.get(pk=job_id).status_reason
    run(job_id)
    assert status(job_id) == J.RUNNING
    return job_id


def lost_work(job_id: int, seconds: float) -> None:
    """The job last committed a checkpoint `seconds` ago."""
    CheckpointManifest.objects.create(job_id=job_id, step=10, uri=f"file:///ckpt/{job_id}/manifest.json",
                                      committed_at=timezone.now() - dt.timedelta(seconds=seconds))


def preempting() -> list[int]:
    return sorted(Job.objects.filter(status=J.PREEMPTING).values_list("pk", flat=True))


def test_a_high_priority_job_preempts_a_low_one_which_yields_requeues_and_resumes_without_a_restart(api):
    bring_online("gpu-a", gpus=gpus(1))
    low = started_running(api, "low", priority="low")
    high = submit(api, "urgent", priority="high")
    queue_schedule()
    assert preempting() == [low]
    victim = Job.objects.get(pk=low)
    assert victim.status_reason.startswith(f"preempted by #{high} (priority 10 (high)) of project default: needs "
                                           "1 GPU on gpu-a")
    assert f"preempting #{low} to make room" in Job.objects.get(pk=high).status_reason
    # Another pass while it yields preempts nothing more and starts nothing on its GPU.
    queue_schedule()
    assert (status(low), status(high)) == (J.PREEMPTING, J.QUEUED)
    yielded(low)
    victim.refresh_from_db()
    assert victim.status == J.PREEMPTED and victim.status_reason.startswith("yielded after committing a checkpoint")
    # It waits in the queue, behind the job that preempted it, which now starts on its GPU.
    entries = queue(api)
    assert [(e["id"], e["position"]) for e in entries] == [(high, 1), (low, 2)]
    queue_schedule()
    assert (status(high), status(low)) == (J.DISPATCHING, J.PREEMPTED)
    run(high)
    for node in JobNode.objects.filter(job_id=high):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_COMPLETED})
    queue_schedule()
    victim.refresh_from_db()
    assert (victim.status, victim.attempt, victim.restarts) == (J.DISPATCHING, 1, 0)


def test_the_lowest_priority_goes_first_then_the_one_that_loses_the_least_work(api):
    bring_online("gpu-a", gpus=gpus(3))
    old_low, fresh_low, normal = (started_running(api, "old-low", priority="low"),
                                  started_running(api, "fresh-low", priority="low"),
                                  started_running(api, "normal"))
    lost_work(old_low, 600)
    lost_work(fresh_low, 10)
    lost_work(normal, 1)
    submit(api, "urgent", priority="high")
    queue_schedule()
    assert preempting() == [fresh_low]
    # The next one needs room too: the other low one goes before the normal one, whatever it loses.
    submit(api, "urgent-2", priority="high")
    yielded(fresh_low)
    queue_schedule()
    queue_schedule()
    assert preempting() == [old_low]
    assert status(normal) == J.RUNNING


def test_only_as_many_as_the_head_needs_and_never_one_of_equal_or_higher_priority(api):
    bring_online("gpu-a", gpus=gpus(2))
    bring_online("gpu-b", gpus=gpus(2))
    low_a, normal_a = started_running(api, "low-a", priority="low"), started_running(api, "normal-a")
    low_b, high_b = started_running(api, "low-b", priority="low"), started_running(api, "high-b", priority="high")
    lost_work(low_a, 5)
    lost_work(low_b, 50)
    # Needs two GPUs of one machine: gpu-a's low one alone is not enough (its other GPU is a normal
    # job's, of equal priority), so only gpu-b's low job would do... and high-b holds the other one.
    equal = submit(api, "needs-two", gpus_per_node=2)
    queue_schedule()
    assert preempting() == []
    assert status(equal) == J.QUEUED
    # A high one needing 2 GPUs: on gpu-a it takes the low and the normal job, on gpu-b it would need
    # high-b's: never. Both of gpu-a's, and nothing else.
    job_stop(job_id=equal)
    submit(api, "high-needs-two", gpus_per_node=2, priority="high")
    queue_schedule()
    assert preempting() == sorted([low_a, normal_a])
    assert (status(low_b), status(high_b)) == (J.RUNNING, J.RUNNING)


def test_a_job_that_is_not_preemptible_is_never_chosen_and_never_borrows(api, owner, teammate):
    bring_online("gpu-a", gpus=gpus(2))
    pinned = started_running(api, "pinned", priority="low", preemptible=False)
    loose = started_running(api, "loose", priority="low", preemption={"grace": 30})
    assert Job.objects.get(pk=pinned).spec["preemptible"] is False
    submit(api, "urgent", priority="high")
    queue_schedule()
    assert preempting() == [loose]
    assert Job.objects.get(pk=loose).status_reason.endswith("checkpointing and yielding (grace 30 s)")
    # A project that may borrow: a job past its quota borrows, unless it may not be preempted.
    vision = Project.objects.create(name="vision", max_gpus=1, borrow=True)
    Membership.objects.create(project=vision, user=teammate, role=Membership.Role.MEMBER)
    bring_online("gpu-b", gpus=gpus(3))
    bob = signed_in(teammate)
    started_running(bob, "within", project="vision")
    refused = bob.post("/api/jobs", spec("too-big", project="vision", gpus_per_node=2, preemptible=False),
                       format="json")
    assert refused.status_code == 400
    assert "preemptible: false runs only within its project's quota" in refused.json()["detail"]
    waits = submit(bob, "pinned-beyond", project="vision", preemptible=False)
    borrows = submit(bob, "loose-beyond", project="vision")
    queue_schedule()
    assert (status(waits), status(borrows)) == (J.QUEUED, J.DISPATCHING)
    assert Job.objects.get(pk=borrows).borrowing


def test_a_project_reclaiming_its_quota_preempts_borrowing_jobs_of_other_projects_first(api, teammate):
    bring_online("gpu-a", gpus=gpus(3))
    Project.objects.filter(name="default").update(max_gpus=1)
    vision = Project.objects.create(name="vision", max_gpus=1, borrow=True)
    misc = Project.objects.create(name="misc")
    for project in (vision, misc):
        Membership.objects.create(project=project, user=teammate, role=Membership.Role.MEMBER)
    bob = signed_in(teammate)
    within = started_running(bob, "within", project="vision")
    borrowing = started_running(bob, "borrowing", project="vision")
    low_elsewhere = started_running(bob, "low-elsewhere", project="misc", priority="low")
    assert Job.objects.get(pk=borrowing).borrowing and not Job.objects.get(pk=within).borrowing
    lost_work(borrowing, 900)
    # Normal priority, within default's quota: it takes back what vision borrows before touching the
    # low job of misc, and never vision's job within its quota (same priority).
    reclaimer = submit(api, "reclaimer")
    queue_schedule()
    assert preempting() == [borrowing]
    assert Job.objects.get(pk=borrowing).status_reason.endswith(
        "this job borrows beyond its project's quota, which project default reclaims; checkpointing and yielding "
        "(grace 120 s)")
    assert status(low_elsewhere) == J.RUNNING
    assert status(reclaimer) == J.QUEUED


def test_a_preempted_job_stopped_while_it_waits_is_stopped(api):
    bring_online("gpu-a", gpus=gpus(1))
    low = started_running(api, "low", priority="low")
    submit(api, "urgent", priority="high")
    queue_schedule()
    yielded(low)
    assert status(low) == J.PREEMPTED
    job_stop(job_id=low)
    assert status(low) == J.STOPPED


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent writers (PostgreSQL)")
def test_two_passes_at_once_never_preempt_twice_for_one_job(owner):
    api = signed_in(owner)
    bring_online("gpu-a", gpus=gpus(2))
    lows = [started_running(api, f"low-{i}", priority="low") for i in range(2)]
    head = submit(api, "urgent", priority="high")
    barrier = threading.Barrier(4)
    errors: list[BaseException] = []

    def one_pass() -> None:
        try:
            barrier.wait()
            queue_schedule()
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=one_pass) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not errors, errors
    assert len(preempting()) == 1 and preempting()[0] in lows
    assert status(head) == J.QUEUED

"""What a shared cluster's users met after the queue (issue 19's leftovers): a recovery that needs
other machines waits its turn behind higher-priority jobs (in place and onto its own spares it goes
at once); a job resumed after a preemption runs PREEMPTION_MIN_RUN before it is preempted again; a
priority change reaches the dashboards' job lists at once; a hot spare used is held again when a
free machine fits and nobody waits for it. Simulated machines; nodes report through
`node_report_state`, a pass is `queue_schedule()`, as in test_queue.py."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
import redis
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from django.db import connection
from django.utils import timezone
from factories import bring_online
from torchyard import protocol
from torchyard_server.jobs.control.queue_pass import queue_schedule
from torchyard_server.jobs.control.recovery import job_recover
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.resize import job_grow_at_checkpoint
from torchyard_server.jobs.control.stop import job_stop
from torchyard_server.jobs.control.supervision import _mark_lost
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.live import groups
from torchyard_server.streaming.ingest import Ingest

from jobs.queue.test_preemption import preempting, started_running, yielded
from jobs.queue.test_queue import finish, gpus, run, status, submit

pytestmark = pytest.mark.django_db
J = Job.Status


def machine_of(job_id: int) -> str:
    return JobNode.objects.filter(job_id=job_id).order_by("-attempt").first().machine_name


def lose(job_id: int) -> None:
    """The job's node is lost (its machine went quiet): the job recovers, the machine is suspect."""
    node = JobNode.objects.get(job_id=job_id, status=JobNode.Status.RUNNING)
    _mark_lost(node, f"node 0 ({node.machine_name}) lost: no heartbeat for 10s")
    assert status(job_id) == J.RECOVERING


# --- 1. a recovery respects the queue ---------------------------------------------------------------
def test_a_recovery_that_needs_other_machines_waits_behind_a_higher_priority_job(api):
    bring_online("gpu-a", gpus=gpus(1))
    bring_online("gpu-b", gpus=gpus(1))
    recovers = started_running(api, "recovers", preemptible=False)
    started_running(api, "other", preemptible=False)
    urgent = submit(api, "urgent", priority="high")
    queue_schedule()
    assert status(urgent) == J.QUEUED and preempting() == []  # nothing it may preempt
    lose(recovers)
    bring_online("gpu-c", gpus=gpus(1))  # a machine frees up while it recovers
    job_recover(job_id=recovers)
    job = Job.objects.get(pk=recovers)
    assert job.status == J.QUEUED, job.status_reason
    assert job.status_reason == (f"recovery: its machines cannot take it back, and #{urgent} (priority 10 (high)) "
                                 "waits ahead of it in the queue: it waits its turn for other machines")
    queue_schedule()
    assert (status(urgent), machine_of(urgent)) == (J.DISPATCHING, "gpu-c")
    assert status(recovers) == J.QUEUED
    # Its turn: it resumes as the next attempt, its restart counted once.
    run(urgent)
    finish(urgent)
    queue_schedule()
    job.refresh_from_db()
    assert (job.status, job.attempt, job.restarts, machine_of(recovers)) == (J.DISPATCHING, 1, 1, "gpu-c")


def test_in_place_and_onto_its_own_spare_a_recovery_goes_at_once_whoever_waits(api):
    bring_online("gpu-a", gpus=gpus(1))
    bring_online("gpu-b", gpus=gpus(1))
    recovers = started_running(api, "recovers", preemptible=False, resources={
        "nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "spares": 1})
    urgent = submit(api, "urgent", priority="high")
    queue_schedule()
    assert status(urgent) == J.QUEUED
    # A rank failed on a healthy machine: the same machine, at once.
    node = JobNode.objects.get(job_id=recovers)
    node_report_state(event={"node": node.pk, "status": protocol.NODE_FAILED, "exit_code": 1, "reason": "exit 1"})
    job_recover(job_id=recovers)
    job = Job.objects.get(pk=recovers)
    assert job.status == J.DISPATCHING and job.status_reason.startswith("in place on the same machines")
    run(recovers)
    # Its machine lost: onto its own hot spare, at once.
    lose(recovers)
    job_recover(job_id=recovers)
    job.refresh_from_db()
    assert job.status == J.DISPATCHING and job.status_reason.startswith("hot spare gpu-b takes node 0's place")
    assert status(urgent) == J.QUEUED


def test_an_elastic_job_shrinks_onto_its_own_machines_at_once_and_grows_only_when_nobody_waits_ahead(api):
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        bring_online(name, gpus=gpus(1))
    elastic = started_running(api, "elastic", nodes="2:3", preemptible=False, elastic={"min_interval": 0})
    assert Job.objects.get(pk=elastic).plan["nnodes"] == 3
    urgent = submit(api, "urgent", priority="high")
    queue_schedule()
    assert status(urgent) == J.QUEUED
    lost = JobNode.objects.get(job_id=elastic, node_rank=2)
    _mark_lost(lost, f"node 2 ({lost.machine_name}) lost: no heartbeat for 10s")
    for node in JobNode.objects.filter(job_id=elastic, status=JobNode.Status.RUNNING):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_STOPPED, "reason": "stopped"})
    job_recover(job_id=elastic)
    job = Job.objects.get(pk=elastic)
    # The two machines it still had take nobody's room: at once, the high job still waiting.
    assert job.status == J.DISPATCHING and job.status_reason.startswith(
        f"re-planned on the machines it held; shrunk from 3 to 2 nodes: machine {lost.machine_name} lost")
    run(elastic)
    bring_online("gpu-d", gpus=gpus(1))
    # A machine free, but the high job comes first: no growth onto it.
    assert not job_grow_at_checkpoint(job_id=elastic, attempt=1)
    job_stop(job_id=urgent)
    assert job_grow_at_checkpoint(job_id=elastic, attempt=1)
    assert status(elastic) == J.RECOVERING


# --- 2. a minimum run time after a resume -----------------------------------------------------------
def test_a_job_resumed_after_a_preemption_runs_its_minimum_before_it_is_preempted_again(api):
    bring_online("gpu-a", gpus=gpus(1))
    low = started_running(api, "low", priority="low")
    first = submit(api, "urgent-1", priority="high")
    queue_schedule()
    yielded(low)
    queue_schedule()
    run(first)
    finish(first)
    queue_schedule()
    assert status(low) == J.DISPATCHING and Job.objects.get(pk=low).plan["after_preemption"] is True
    run(low)
    second = submit(api, "urgent-2", priority="high")
    queue_schedule()
    # Not preempted again at once: the head says when it may be.
    assert preempting() == []
    reason = Job.objects.get(pk=second).status_reason
    assert f"first in line: #{low} resumed after a preemption and may be preempted again in about 2 min " \
           "(a resumed job runs 120 s first)" in reason, reason
    # Once it has run its minimum, it is.
    JobNode.objects.filter(job_id=low, status=JobNode.Status.RUNNING).update(
        started_at=timezone.now() - dt.timedelta(seconds=121))
    queue_schedule()
    assert preempting() == [low]


def test_a_first_attempt_has_no_minimum_and_the_setting_turns_it_off(api, settings):
    bring_online("gpu-a", gpus=gpus(1))
    low = started_running(api, "low", priority="low")
    assert "after_preemption" not in Job.objects.get(pk=low).plan
    submit(api, "urgent-1", priority="high")
    queue_schedule()
    assert preempting() == [low]  # its first attempt: as before
    settings.PREEMPTION_MIN_RUN = 0
    yielded(low)
    queue_schedule()
    first = Job.objects.filter(name="urgent-1").get().pk
    run(first)
    finish(first)
    queue_schedule()
    run(low)
    submit(api, "urgent-2", priority="high")
    queue_schedule()
    assert preempting() == [low]


# --- 3. a priority change on the job lists ------------------------------------------------------------
@pytest.mark.django_db(transaction=True)
def test_a_priority_change_reaches_the_cluster_stream_at_once(api):
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.delete(protocol.EVENT_STREAM)
    ingest = Ingest(settings.REDIS_URL)
    ingest.ensure_group()
    bring_online("gpu-a", gpus=gpus(1))
    job_id = submit(api, "waits")
    ingest.step()  # its own backlog: empty
    assert ingest.step() == 1  # the submission's event: its summary sent before anyone listens
    layer = get_channel_layer()

    def patch_and_ingest():
        try:
            response = api.patch(f"/api/jobs/{job_id}", {"priority": "high"}, format="json")
            while ingest.step():
                pass
            return response
        finally:
            connection.close()  # this thread's own

    async def change_and_listen() -> list[dict]:
        channel = await layer.new_channel()
        await layer.group_add(groups.CLUSTER, channel)
        try:
            response = await asyncio.to_thread(patch_and_ingest)
            assert response.status_code == 200, response.json()
            received = []
            while True:
                try:
                    received.append(await asyncio.wait_for(layer.receive(channel), timeout=1.0))
                except TimeoutError:
                    return received
        finally:
            await layer.group_discard(groups.CLUSTER, channel)

    received = async_to_sync(change_and_listen)()
    summaries = [m["job"] for m in received if m["type"] == "cluster.job" and m["job"]["id"] == job_id]
    assert summaries and summaries[-1]["priority"] == 10 and summaries[-1]["status"] == J.QUEUED
    event = next(e for e in Job.objects.get(pk=job_id).events.filter(type=protocol.STATE).order_by("-id"))
    assert event.payload["reason"] == "priority changed from 0 (normal) to 10 (high) by alice"
    client.delete(protocol.EVENT_STREAM)


# --- 4. a used spare is held again --------------------------------------------------------------------
def test_a_used_spare_is_held_again_when_a_free_machine_fits_and_nobody_waits_for_room(
        api, django_capture_on_commit_callbacks):
    bring_online("gpu-a", gpus=gpus(1))
    bring_online("gpu-b", gpus=gpus(1))
    recovers = started_running(api, "recovers", resources={"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1,
                                                           "spares": 1})
    lose(recovers)
    job_recover(job_id=recovers)
    run(recovers)
    assert Job.objects.get(pk=recovers).plan["spares"] == []
    spare, _ = bring_online("gpu-c", gpus=gpus(1))
    # A job waiting for room (two machines) comes first: no spare taken while it waits.
    waiter = submit(api, "two-nodes", nodes=2)
    queue_schedule()
    assert status(waiter) == J.QUEUED and Job.objects.get(pk=recovers).plan["spares"] == []
    job_stop(job_id=waiter)
    broker = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    broker.delete(protocol.machine_queue(spare.pk))
    with django_capture_on_commit_callbacks(execute=True):
        queue_schedule()
    job = Job.objects.get(pk=recovers)
    assert [(x["machine_name"], x["gpus"]) for x in job.plan["spares"]] == [("gpu-c", [0])]
    # Warmed as a spare is (its agent prepares the job's code and a warm pool), and held from others.
    assert any(protocol.TASK_WARM_CACHES.encode() in raw for raw in broker.lrange(protocol.machine_queue(spare.pk), 0, -1))
    other = submit(api, "other")
    queue_schedule()
    assert status(other) == J.QUEUED
    queue_schedule()  # nothing more to hold: still one
    assert len(Job.objects.get(pk=recovers).plan["spares"]) == 1

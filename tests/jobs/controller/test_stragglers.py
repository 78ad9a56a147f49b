"""Stragglers (jobs/control/stragglers.py): each rank's own step time against the median of the others,
named after the window with what its machine shows and cleared when it keeps up; under `replace`
its node goes onto a hot spare at the next committed checkpoint."""

from __future__ import annotations

import pytest
import redis
from django.conf import settings
from factories import bring_online, make_job, make_node
from torchyard import protocol
from torchyard_server.checkpoints.services import checkpoint_record
from torchyard_server.jobs.control.queue_pass import queue_schedule
from torchyard_server.jobs.control.recovery import job_recover
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.control.stragglers import job_record_pace
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.streaming.ingest import Ingest
from torchyard_server.streaming.models import JobEvent

from jobs.controller.test_stalls import drain
from jobs.queue.test_queue import gpus, run, status, submit

J = Job.Status
T0 = 1_700_000_000.0


def pace(own: dict[int, float], ranks: dict[int, dict] | None = None, host: dict | None = None) -> dict:
    """A node's `pace` payload: each rank's own step time (and `ranks`' other figures), the wall step 0.5 s."""
    return {"window_s": 10.0, "host": {"cpus": 2, **(host or {})},
            "ranks": {str(rank): {"step_s": 0.5, "own_share": s / 0.5, "own_step_s": s, "steps": 20,
                                  "stopped": 0.0, **(ranks or {}).get(rank, {})} for rank, s in own.items()}}


@pytest.mark.django_db(transaction=True)
def test_a_rank_slower_than_the_others_for_the_window_is_named_with_its_evidence_and_cleared_when_it_keeps_up(owner):
    redis_url = settings.REDIS_URL  # where the controller publishes its own events
    client = redis.Redis.from_url(redis_url)
    client.delete(protocol.EVENT_STREAM)
    job = make_job(name="j", owner=owner, status=J.RUNNING, world_size=4, progress={},
                   spec={"fault_tolerance": {"straggler_window": 20}})
    nodes = [make_node(job, node_rank=r, nproc=2, machine_name=f"box{r}") for r in (0, 1)]
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    seq = iter(range(1, 100))

    def send(node: JobNode, at: float, payload: dict) -> None:
        event = {"type": protocol.PACE, "job": job.pk, "attempt": 0, "node": node.pk, "node_rank": node.node_rank,
                 "seq": next(seq), "ts": T0 + at, **payload}
        client.xadd(protocol.EVENT_STREAM, protocol.encode_event(event))

    def stragglers() -> list[dict]:
        return Job.objects.get(pk=job.pk).progress.get("stragglers") or []

    try:
        stopped = {3: {"stopped": 0.62, "cpu_wait": 0.02}}
        send(nodes[0], 0, pace({0: 0.1, 1: 0.11}))
        send(nodes[1], 0, pace({2: 0.09, 3: 0.45}, stopped, host={"others": [{"pid": 9, "name": "yes", "cpu": 0.9}]}))
        drain(ingest)
        assert stragglers() == []  # slow for one window (10 s) of the 20 it takes

        send(nodes[0], 10, pace({0: 0.1, 1: 0.1}))
        send(nodes[1], 10, pace({2: 0.1, 3: 0.44}, stopped))
        drain(ingest)
        [named] = stragglers()
        assert (named["rank"], named["machine"], named["node_rank"], named["median_s"], named["ratio"]) == (
            3, "box1", 1, 0.1, 4.4)
        assert named["evidence"] == "its process was stopped 62% of the time (SIGSTOP, a debugger?)"
        assert named["policy"] == "report" and "replace" not in named
        drain(ingest)  # the controller's own event
        [event] = JobEvent.objects.filter(job=job, type=protocol.STRAGGLER)
        assert (event.rank, event.node_id, event.payload["state"]) == (3, nodes[1].pk, "named")
        assert event.payload["summary"] == (
            "rank 3 on machine box1 takes 0.44 s of its own per step against a median of 0.1 s for the other ranks "
            "(4.4x): its process was stopped 62% of the time (SIGSTOP, a debugger?)")
        assert Job.objects.get(pk=job.pk).progress["pace"]["ranks"]["3"]["slow_since"] == T0 - 10

        send(nodes[1], 20, pace({2: 0.1, 3: 0.12}))  # 20 % over: keeps up
        drain(ingest)
        drain(ingest)
        assert stragglers() == []
        cleared = JobEvent.objects.get(job=job, type=protocol.STRAGGLER, payload__state="cleared")
        assert cleared.payload["summary"] == "rank 3 keeps up again (0.12 s of its own per step)"
        # A node of another attempt, or a job that switched the watch off, changes nothing.
        Job.objects.filter(pk=job.pk).update(spec={**job.spec, "fault_tolerance": {"stragglers": "off"}})
        job_record_pace(job_id=job.pk, attempt=0, node_id=nodes[1].pk, ts=T0 + 30, payload=pace({2: 0.1, 3: 2.0}))
        assert Job.objects.get(pk=job.pk).progress["pace"]["ranks"]["3"]["own_step_s"] == 0.12
    finally:
        client.delete(protocol.EVENT_STREAM)


def test_tiny_steps_and_a_lone_rank_name_no_one(owner, db):
    job = make_job(name="j", owner=owner, status=J.RUNNING, world_size=3, progress={},
                   spec={"fault_tolerance": {"straggler_window": 3}})
    node = make_node(job, nproc=3)
    for at in (0, 10, 20):  # 3x slower, but 2 ms a step: noise
        job_record_pace(job_id=job.pk, attempt=0, node_id=node.pk, ts=T0 + at, payload=pace({0: 0.001, 1: 0.001, 2: 0.003}))
    assert "stragglers" not in Job.objects.get(pk=job.pk).progress
    alone = make_job(name="alone", owner=owner, status=J.RUNNING, world_size=1, progress={})
    one = make_node(alone)
    for at in (0, 100):
        job_record_pace(job_id=alone.pk, attempt=0, node_id=one.pk, ts=T0 + at, payload=pace({0: 5.0}))
    assert "stragglers" not in Job.objects.get(pk=alone.pk).progress


def slow_node_1(job_id: int, at: float) -> None:
    for node in JobNode.objects.filter(job_id=job_id, attempt=Job.objects.get(pk=job_id).attempt):
        slow = node.node_rank == 1
        job_record_pace(job_id=job_id, attempt=node.attempt, node_id=node.pk, ts=T0 + at,
                        payload=pace({node.rank_start: 0.5 if slow else 0.1},
                                     {node.rank_start: {"cpu_wait": 0.7}} if slow else None))


def test_under_replace_the_stragglers_node_moves_onto_the_hot_spare_at_the_next_committed_checkpoint(api):
    for name in ("gpu-a", "gpu-b", "gpu-c"):
        bring_online(name, gpus=gpus(1))
    job_id = submit(api, "replaced", resources={"nodes": 2, "procs_per_node": 1, "gpus_per_node": 1,
                                                          "spares": 1},
                    fault_tolerance={"stragglers": "replace", "straggler_window": 5})
    queue_schedule()
    run(job_id)
    assert status(job_id) == J.RUNNING
    slow_machine = JobNode.objects.get(job_id=job_id, node_rank=1).machine_name
    spare = Job.objects.get(pk=job_id).plan["spares"][0]["machine_name"]
    for at in (0, 10):
        slow_node_1(job_id, at)
    [named] = Job.objects.get(pk=job_id).progress["stragglers"]
    assert (named["rank"], named["replace"]) == (1, "pending")
    assert named["evidence"] == "it waited for a CPU 70% of the time"

    checkpoint_record(event={"job": job_id, "attempt": 0, "step": 40, "uri": "file:///c/40"})
    job = Job.objects.get(pk=job_id)
    assert job.status == J.RECOVERING and job.restarts == 0
    assert job.status_reason.startswith(f"replacing rank 1 on machine {slow_machine} takes 0.5 s of its own per step")
    assert job.status_reason.endswith("stopping attempt 0 at its committed checkpoint")
    assert job.progress["stragglers"][0]["replace"] == "replaced"
    for node in JobNode.objects.filter(job_id=job_id):
        node_report_state(event={"node": node.pk, "status": protocol.NODE_STOPPED, "reason": "stopped"})
    job_recover(job_id=job_id)
    job.refresh_from_db()
    assert job.status == J.DISPATCHING and job.attempt == 1
    assert job.status_reason.startswith(
        f"hot spare {spare} takes node 1's place ({slow_machine} straggler: rank 1, 5.0x the median)")
    assert JobNode.objects.get(job_id=job_id, attempt=1, node_rank=1).machine_name == spare
    assert "stragglers" not in job.progress and "leaving" not in job.plan


def test_under_replace_without_a_spare_the_straggler_is_reported_only(api):
    for name in ("gpu-a", "gpu-b"):
        bring_online(name, gpus=gpus(1))
    job_id = submit(api, "kept", resources={"nodes": 2, "procs_per_node": 1, "gpus_per_node": 1},
                    fault_tolerance={"stragglers": "replace", "straggler_window": 5})
    queue_schedule()
    run(job_id)
    for at in (0, 10):
        slow_node_1(job_id, at)
    checkpoint_record(event={"job": job_id, "attempt": 0, "step": 40, "uri": "file:///c/40"})
    job = Job.objects.get(pk=job_id)
    assert job.status == J.RUNNING
    assert job.progress["stragglers"][0]["replace"] == "no hot spare to take its place: reported only"

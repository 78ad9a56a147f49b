"""Stalled ranks as the control plane sees them: one verdict across every node (jobs/stalls.py),
fed by real `stalled` and `metric` events through the ingest loop."""

from __future__ import annotations

import pytest
import redis
from torchyard import protocol
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.stalls import classify_stall
from torchyard_server.streaming.ingest import Ingest
from torchyard_server.streaming.models import JobEvent


def stalled(step: int, state: str = "sleeping") -> dict:
    return {"step": step, "process_state": state}


def test_every_rank_stopped_at_one_step_is_a_hung_collective():
    kind, summary = classify_stall({"0": stalled(41), "1": stalled(41, "stopped")}, {"0": 41, "1": 41}, 2)
    assert kind == "collective"
    assert summary == ("all 2 ranks stopped together at step 41: a hung collective; "
                       "the process of rank 1 is stopped (a signal, a debugger)")


def test_a_rank_behind_the_others_is_a_straggler():
    kind, summary = classify_stall({"2": stalled(10)}, {"0": 14, "1": 15, "2": 10, "3": 14}, 4)
    assert (kind, summary) == ("straggler", "rank 2 stalled at step 10 while rank 1 reached step 15: a straggler")


def test_one_rank_reported_first_is_named_alone_until_the_others_say_more():
    assert classify_stall({"1": stalled(7)}, {"0": 7, "1": 7}, 2) == ("rank", "rank 1 stalled at step 7")


def drain(ingest: Ingest) -> None:
    ingest.step()  # its own backlog first, then what waits
    while ingest.step():
        pass


@pytest.mark.django_db(transaction=True)
def test_ingested_stalls_build_the_jobs_verdict_and_progress_clears_it(redis_url, owner):
    client = redis.Redis.from_url(redis_url)
    client.delete(protocol.EVENT_STREAM)
    job = Job.objects.create(name="j", spec={}, owner=owner, world_size=2, progress={})
    ingest = Ingest(redis_url)
    ingest.ensure_group()
    seq = iter(range(1, 100))

    def send(kind: str, rank: int, **payload) -> None:
        event = {"type": kind, "job": job.pk, "attempt": 0, "node": None, "node_rank": rank, "rank": rank,
                 "seq": None, "key": f"s{job.pk}-{next(seq)}", "ts": 1_700_000_000.0, **payload}
        client.xadd(protocol.EVENT_STREAM, protocol.encode_event(event))

    try:
        for rank in (0, 1):
            send(protocol.METRIC, rank, step=41, loss=0.5)
        send(protocol.STALLED, 1, step=41, stalled_for=8.0, process_state="stopped", stack="...", last_line="x")
        drain(ingest)
        stall = Job.objects.get(pk=job.pk).progress["stall"]
        assert stall["kind"] == "rank" and stall["ranks"]["1"]["process_state"] == "stopped"
        assert stall["ranks"]["1"]["event"] == JobEvent.objects.get(job=job, type="stalled").pk

        send(protocol.STALLED, 0, step=41, stalled_for=8.2, process_state="sleeping", stack="...", last_line="y")
        drain(ingest)
        assert Job.objects.get(pk=job.pk).progress["stall"]["kind"] == "collective"

        for rank in (0, 1):  # they move again (a SIGCONT, say): the verdict goes
            send(protocol.METRIC, rank, step=42, loss=0.4)
        drain(ingest)
        progress = Job.objects.get(pk=job.pk).progress
        assert "stall" not in progress and progress["step_by_rank"] == {"0": 42, "1": 42}
    finally:
        client.delete(protocol.EVENT_STREAM)

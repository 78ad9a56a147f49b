"""A job page opens on the tail (`?history=tail`): the first replay holds each rank's last lines,
every state, its latest metrics; older lines page from `/logs?tail=&before=` with no gap and no
duplicate; a reconnect resumes from the cursor, exactly. Through the whole ASGI application, a
real channel layer on Redis and the test database (test_job_stream_frames.py's Stream)."""

from __future__ import annotations

import datetime as dt

import pytest
from clients import signed_in
from factories import make_job
from torchyard_server.jobs.models import Job, JobNode
from torchyard_server.live import replay
from torchyard_server.live.replay import METRIC_POINTS_PER_RANK, lines_per_rank
from torchyard_server.streaming.bulk import StoredEvent, insert_events

from live.test_job_stream_frames import Stream

pytestmark = pytest.mark.django_db(transaction=True)

WORLD = 200  # a rank's share of the tail is then the least, MIN_LINES_PER_RANK
PER_RANK = lines_per_rank(WORLD)
# Lines printed by ranks 0, 1, 2: rank 1 printed fewer than its share, so all of its lines are sent.
PRINTED = {0: PER_RANK + 70, 1: PER_RANK - 20, 2: PER_RANK + 30}


@pytest.fixture
def big(django_user_model, member) -> Job:
    """A finished job whose ranks printed in turn, with states, metrics and resource samples between."""
    job = make_job(name="big", owner=django_user_model.objects.get(username="mia"), world_size=WORLD)
    rows: list[StoredEvent] = []

    def event(rank: int, kind: str, payload: dict) -> None:
        rows.append(StoredEvent(job_id=job.pk, node_id=None, attempt=0, node_rank=rank, rank=rank, type=kind,
                                ts=dt.datetime.now(dt.UTC), payload=payload, dedupe_key=f"c{job.pk}-{len(rows)}"))

    for rank in PRINTED:
        event(rank, "state", {"scope": "node", "status": "running", "previous": "launching", "reason": ""})
    for i in range(max(PRINTED.values())):
        for rank, count in PRINTED.items():
            if i < count:
                event(rank, "log", {"stream": "stdout", "line": f"rank {rank} line {i}"})
        event(0, "metric", {"step": i, "loss": 1 / (1 + i)})
        event(0, "resource", {"cpu": 1.0})
        if i == 40:
            event(0, "checkpoint", {"step": i, "path": "/ckpt/40"})
    for rank in PRINTED:
        event(rank, "state", {"scope": "node", "status": "completed", "previous": "running", "reason": ""})
    event(2, "log", {"stream": "stdout", "line": "rank 2 last words"})  # the job's last event is a line
    insert_events(rows)
    return job


def first_replay(job: Job, member, after: int = 0) -> tuple[dict | None, list[dict]]:
    """The `history` message (None when there was none) and the replayed events, in order."""
    stream = Stream(f"/api/jobs/{job.pk}/stream?after={after}&history=tail", member)
    try:
        frames = stream.frames_until_replayed()
    finally:
        stream.close()
    history = next((f for f in frames if f["type"] == "history"), None)
    return history, [e for f in frames if f["type"] == "events" for e in f["events"]]


def stored_messages(job: Job) -> list[dict]:
    return [e.as_message() for e in job.events.order_by("id")]


def all_logs(job: Job) -> list[dict]:
    return [e for e in stored_messages(job) if e["type"] == "log"]


def test_the_first_replay_holds_each_ranks_tail_every_state_and_its_latest_metrics(big, member):
    history, events = first_replay(big, member)
    stored = stored_messages(big)
    ids = [e["id"] for e in events]
    assert ids == sorted(set(ids))

    for rank in PRINTED:
        printed = [e["id"] for e in stored if e["type"] == "log" and e["rank"] == rank]
        sent = [e["id"] for e in events if e["type"] == "log" and e["rank"] == rank]
        assert sent == printed[-PER_RANK:]
    assert [e for e in events if e["type"] in ("state", "checkpoint")] == [
        e for e in stored if e["type"] in ("state", "checkpoint")]
    assert not [e for e in events if e["type"] == "resource"]
    # The charts' history comes from /metrics; the stream holds each rank's latest points.
    assert [e for e in events if e["type"] == "metric"] == [
        e for e in stored if e["type"] == "metric"][-METRIC_POINTS_PER_RANK:]

    # Older lines begin below the latest first line of a cut rank (rank 2's: it printed last).
    first_sent = {r: next(e["id"] for e in events if e["type"] == "log" and e["rank"] == r) for r in (0, 2)}
    assert history == {"type": "history", "logs_before": max(first_sent.values()), "lines_per_rank": PER_RANK,
                       "last_id": stored[-1]["id"]}
    # From there on every line was sent.
    assert [e["id"] for e in events if e["type"] == "log" and e["id"] >= history["logs_before"]] == [
        e["id"] for e in stored if e["type"] == "log" and e["id"] >= history["logs_before"]]


def test_paging_older_lines_from_where_history_begins_fills_in_every_line_once(big, member):
    history, events = first_replay(big, member)
    client = signed_in(big.owner)
    shown = {e["id"]: e for e in events if e["type"] == "log"}
    before, pages = history["logs_before"], []
    while page := client.get(f"/api/jobs/{big.pk}/logs?tail=100&before={before}").json()["events"]:
        pages.append(page)
        assert [e["id"] for e in page] == sorted(e["id"] for e in page) and page[-1]["id"] < before
        before = page[0]["id"]
    paged = [e for page in reversed(pages) for e in page]
    # Pages are contiguous below the boundary; the lines the tail already showed come again, the same.
    assert [e["id"] for e in paged] == [e["id"] for e in all_logs(big) if e["id"] < history["logs_before"]]
    assert all(shown[e["id"]] == e for e in paged if e["id"] in shown)
    merged = {**shown, **{e["id"]: e for e in paged}}
    assert sorted(merged) == [e["id"] for e in all_logs(big)]


def test_a_busy_jobs_tail_is_read_without_its_whole_log_and_what_it_left_out_pages(django_user_model, member,
                                                                                   monkeypatch):
    # Scanned 50 rows at a time (the job's log is short): the scan stops once both of the nodes'
    # ranks have more than their tail, before the controller's early line.
    monkeypatch.setattr(replay, "SCAN_ROWS", 50)
    job = make_job(name="busy", owner=django_user_model.objects.get(username="mia"),
                             world_size=100)
    for rank in (0, 1):
        JobNode.objects.create(job=job, attempt=0, machine_name=f"m{rank}", host="10.0.0.1", node_rank=rank, nproc=1,
                               rank_start=rank, rank_end=rank)
    per_rank = lines_per_rank(100)

    def line(rank: int | None, i: int) -> StoredEvent:
        return StoredEvent(job_id=job.pk, node_id=None, attempt=0, node_rank=rank, rank=rank, type="log",
                           ts=dt.datetime.now(dt.UTC), payload={"stream": "stdout", "line": f"{rank} {i}"},
                           dedupe_key=f"c{job.pk}-{rank}-{i}")

    insert_events([line(None, 0), *[line(i % 2, i) for i in range(3 * per_rank)]])
    history, events = first_replay(job, member)
    stored = all_logs(job)
    for rank in (0, 1):
        assert [e["id"] for e in events if e["rank"] == rank] == [e["id"] for e in stored if e["rank"] == rank][-per_rank:]
    assert [e for e in events if e["rank"] is None] == []
    assert stored[0]["rank"] is None and stored[0]["id"] < history["logs_before"]
    assert [e["id"] for e in events if e["id"] >= history["logs_before"]] == [
        e["id"] for e in stored if e["id"] >= history["logs_before"]]


def test_a_reconnect_after_the_tail_resumes_from_its_cursor(big, member):
    history, _ = first_replay(big, member)
    more = [StoredEvent(job_id=big.pk, node_id=None, attempt=0, node_rank=1, rank=1, type="log",
                        ts=dt.datetime.now(dt.UTC), payload={"stream": "stdout", "line": f"late {i}"},
                        dedupe_key=f"c{big.pk}-late-{i}") for i in range(3)]
    insert_events(more)
    again, events = first_replay(big, member, after=history["last_id"])
    assert again is None  # resuming: no tail, only what came after the cursor
    assert [e["line"] for e in events] == ["late 0", "late 1", "late 2"]


def test_a_job_without_events_replays_nothing_and_has_no_older_lines(job, member):
    history, events = first_replay(job, member)
    assert events == [] and history == {"type": "history", "logs_before": None,
                                        "lines_per_rank": lines_per_rank(job.world_size), "last_id": 0}


def test_without_history_tail_a_stream_still_replays_everything(big, member):
    stream = Stream(f"/api/jobs/{big.pk}/stream?after=0", member)
    try:
        frames = stream.frames_until_replayed()
    finally:
        stream.close()
    assert [e["id"] for f in frames if f["type"] == "events" for e in f["events"]] == [
        e["id"] for e in stored_messages(big)]
    assert "history" not in [f["type"] for f in frames]

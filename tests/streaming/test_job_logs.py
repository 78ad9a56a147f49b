"""A job's logs: `GET /api/jobs/{id}/logs?tail=N` and, as Server-Sent Events, `/logs/stream` of a
finished job (replay after `Last-Event-ID`, then `end`; 204 once nothing is left). Following a live
job through daphne is tests/integration/test_log_stream.py."""

from __future__ import annotations

import datetime as dt
import json

import pytest
from asgiref.sync import async_to_sync
from clients import signed_in
from factories import make_job
from torchyard_server.jobs.models import Job
from torchyard_server.projects.models import Membership, Project
from torchyard_server.streaming.models import JobEvent

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(owner):
    job = make_job(name="chatty", owner=owner, status=Job.Status.COMPLETED,
                             status_reason="all nodes completed")
    start = dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    rows = []
    for i in range(12):
        kind = "metric" if i % 4 == 3 else "log"
        payload = {"step": i} if kind == "metric" else {"line": f"line {i}", "stream": "stdout"}
        rows.append(JobEvent(job=job, attempt=0, rank=i % 2, node_rank=0, type=kind, ts=start + dt.timedelta(seconds=i),
                             payload=payload, dedupe_key=f"l{job.pk}:{i}"))
    JobEvent.objects.bulk_create(rows)
    return job


def all_lines(api, job) -> list[dict]:
    return api.get(f"/api/jobs/{job.pk}/logs").json()["events"]


def parse_sse(body: bytes) -> list[dict]:
    """Each message as {"id", "event", "data"} (comments and the retry hint dropped)."""
    messages = []
    for block in body.decode().split("\n\n"):
        fields: dict = {}
        for line in block.splitlines():
            name, _, value = line.partition(": ")
            if name in ("id", "event", "data"):
                fields[name] = value
        if "event" in fields:
            messages.append({"id": int(fields["id"]) if "id" in fields else None, "event": fields["event"],
                             "data": json.loads(fields["data"])})
    return messages


def stream(api, job, **headers) -> tuple[int, list[dict], object]:
    query = headers.pop("query", "")
    response = api.get(f"/api/jobs/{job.pk}/logs/stream{query}", HTTP_ACCEPT="text/event-stream", **headers)
    if response.status_code != 200:
        return response.status_code, [], response
    return 200, parse_sse(async_to_sync(read_all)(response.streaming_content)), response


async def read_all(chunks) -> bytes:
    # The stream is an async iterator, as daphne serves it.
    return b"".join([chunk async for chunk in chunks])


def test_tail_gives_the_last_lines_oldest_first(api, finished):
    lines = all_lines(api, finished)
    assert [e["line"] for e in lines] == [f"line {i}" for i in range(12) if i % 4 != 3]
    tail = api.get(f"/api/jobs/{finished.pk}/logs?tail=3").json()
    assert tail["events"] == lines[-3:] and tail["next_after"] == lines[-1]["id"]
    ranked = api.get(f"/api/jobs/{finished.pk}/logs?tail=2&rank=0").json()["events"]
    assert [e["line"] for e in ranked] == ["line 8", "line 10"]
    assert api.get(f"/api/jobs/{finished.pk}/logs?tail=x").status_code == 400


def test_before_pages_older_lines_above_one_already_shown(api, finished):
    lines = all_lines(api, finished)
    older = api.get(f"/api/jobs/{finished.pk}/logs?tail=2&before={lines[4]['id']}").json()["events"]
    assert older == lines[2:4]
    assert api.get(f"/api/jobs/{finished.pk}/logs?tail=5&before={lines[0]['id']}").json()["events"] == []
    assert api.get(f"/api/jobs/{finished.pk}/logs?before=x").status_code == 400


def test_the_stream_resumes_after_last_event_id_and_ends_with_the_job(api, finished):
    lines = all_lines(api, finished)
    status, messages, response = stream(api, finished, HTTP_LAST_EVENT_ID=str(lines[2]["id"]))
    assert status == 200 and response["Content-Type"] == "text/event-stream"
    assert response["Cache-Control"] == "no-cache"
    *logs, end = messages
    assert [(m["id"], m["event"]) for m in logs] == [(e["id"], "log") for e in lines[3:]]
    assert [m["data"] for m in logs] == lines[3:]  # the same event as /logs shows it
    assert end == {"id": None, "event": "end", "data": {"job": finished.pk, "status": "completed",
                                                         "status_reason": "all nodes completed",
                                                         "last_id": lines[-1]["id"]}}
    # EventSource reconnects after the end: 204 tells it to stop.
    assert stream(api, finished, HTTP_LAST_EVENT_ID=str(lines[-1]["id"]))[0] == 204


def test_the_stream_starts_where_asked(api, finished):
    lines = all_lines(api, finished)
    assert [m["id"] for m in stream(api, finished)[1][:-1]] == [e["id"] for e in lines]
    assert [m["id"] for m in stream(api, finished, query="?tail=2")[1][:-1]] == [e["id"] for e in lines[-2:]]
    assert [m["id"] for m in stream(api, finished, query=f"?after={lines[5]['id']}")[1][:-1]] == [e["id"] for e in lines[6:]]
    assert [m["data"]["line"] for m in stream(api, finished, query="?rank=1")[1][:-1]] == [
        e["line"] for e in lines if e["rank"] == 1]


def test_a_bad_cursor_is_a_400_and_another_projects_job_a_404(api, finished, django_user_model):
    bad = api.get(f"/api/jobs/{finished.pk}/logs/stream", HTTP_LAST_EVENT_ID="soon")
    assert bad.status_code == 400 and "Last-Event-ID" in bad.json()
    oz = django_user_model.objects.create_user("oz")
    Membership.objects.filter(user=oz).delete()
    Membership.objects.create(project=Project.objects.create(name="elsewhere"), user=oz, role="member")
    assert signed_in(oz).get(f"/api/jobs/{finished.pk}/logs/stream").status_code == 404

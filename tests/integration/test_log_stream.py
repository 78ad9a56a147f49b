"""The Rust coordinator's log stream on the real stack (daphne, ingest, the channel layer, PostgreSQL): a job's
lines as Server-Sent Events followed live, a reconnect with `Last-Event-ID` resuming with no gap
and no duplicate, the stream ending with the job; and the summary's progress from the total the
recipe declared through the SDK."""

from __future__ import annotations

import json
from collections.abc import Iterator

import requests

SPEC = {
    "name": "sse-follow",
    "entrypoint": "examples/mlp_ddp.py",
    # `--steps=N`, not `--steps N`: the control plane cannot read the total from the arguments, so
    # the summary's total comes from sdk.set_total_steps() in the recipe.
    "args": ["--steps=300", "--step-sleep", "0.04", "--report-every", "5", "--log-every", "5"],
    "resources": {"nodes": 1, "procs_per_node": 2},
    "fault_tolerance": {"max_restarts": 0},
}


def sse_messages(response: requests.Response) -> Iterator[dict]:
    """Each message of an event stream as {"id", "event", "data"}; comments and hints skipped."""
    fields: dict = {}
    for line in response.iter_lines(decode_unicode=True):
        if line:
            name, _, value = line.partition(": ")
            fields[name] = value
            continue
        if "event" in fields:
            yield {"id": int(fields["id"]) if "id" in fields else None, "event": fields["event"],
                   "data": json.loads(fields["data"])}
        fields = {}


def open_stream(stack, job_id: int, last_id: int | None = None) -> requests.Response:
    headers = {"Accept": "text/event-stream"}
    if last_id is not None:
        headers["Last-Event-ID"] = str(last_id)
    # The read timeout bounds each wait: the stream sends a keep-alive at least every 5 s.
    response = stack.api("GET", f"/api/jobs/{job_id}/logs/stream", headers=headers, stream=True)
    assert response.status_code in (200, 204), response.text
    return response


def test_the_log_stream_follows_a_job_resumes_from_last_event_id_and_ends_with_it(pg_stack):
    job = pg_stack.submit(SPEC)

    first: list[dict] = []
    with open_stream(pg_stack, job["id"]) as response:
        assert response.headers["Content-Type"] == "text/event-stream"
        for message in sse_messages(response):
            assert message["event"] == "log", message
            first.append(message)
            if len(first) == 10:
                break
    # Those lines came live: the job was still training when the client went away.
    assert pg_stack.job(job["id"])["status"] in ("dispatching", "running")

    second: list[dict] = []
    with open_stream(pg_stack, job["id"], last_id=first[-1]["id"]) as response:
        for message in sse_messages(response):
            second.append(message)
        # The server closed the stream after `end`.
    *lines, end = second
    assert end["event"] == "end" and end["id"] is None
    assert end["data"]["status"] == "completed", pg_stack.job_log_tail(job["id"])
    assert {m["event"] for m in lines} == {"log"}

    stored = pg_stack.logs(job["id"])
    received = first + lines
    assert [m["id"] for m in received] == [e["id"] for e in stored], "a gap or a duplicate across the reconnect"
    assert [m["data"] for m in received] == stored
    assert end["data"]["last_id"] == stored[-1]["id"]
    assert sum(1 for e in stored if (e.get("line") or "").startswith("rank ")) >= 2 * 300 // 5
    # Once it has ended, a reconnect is told to stop (204).
    with open_stream(pg_stack, job["id"], last_id=stored[-1]["id"]) as response:
        assert response.status_code == 204

    # Its length came from the SDK (the recipe declares it), and the rates from the metrics.
    progress = pg_stack.job(job["id"])["progress"]
    assert (progress["step"], progress["total_steps"]) == (300, 300), progress
    assert progress["steps_per_second"] > 0 and progress["samples_per_second"] > 0
    assert progress["eta_seconds"] == 0.0

"""Following a job: the renderer fed stream messages by hand (plain lines off a terminal, progress
bars on one), and the follower against a small WebSocket server that drops the link mid-job."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from rich.console import Console
from torchyard.client import CliError, follow
from torchyard.client.follow import CLOSE_RESUME, JobFollower, JobRenderer, follow_job
from torchyard.client.http import ApiClient
from websockets.sync.server import ServerConnection, serve


def plain_console() -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    return Console(file=buffer, force_terminal=False), buffer


def detail(status: str = "running", *, attempt: int = 0, total: int | None = 100, nodes: list | None = None,
           reason: str = "") -> dict[str, Any]:
    nodes = nodes if nodes is not None else [
        {"node_rank": 0, "machine": {"id": 1, "name": "m1", "host": "10.0.0.1"}, "rank_start": 0, "rank_end": 1,
         "status": "running", "progress": {"step": 10}},
        {"node_rank": 1, "machine": {"id": 2, "name": "m2", "host": "10.0.0.2"}, "rank_start": 2, "rank_end": 3,
         "status": "running", "progress": {}},
    ]
    return {"type": "job", "job": {"id": 7, "name": "demo", "status": status, "status_reason": reason,
                                   "attempt": attempt, "progress": {"step": 10, "total_steps": total}, "nodes": nodes}}


def log(event_id: int, rank: int | None, line: str, *, stream: str = "stdout", node_rank: int = 0, **extra: Any) -> dict:
    return {"id": event_id, "type": "log", "rank": rank, "node_rank": node_rank, "attempt": 0, "stream": stream,
            "line": line, "ts": "2025-01-01T00:00:00+00:00", **extra}


def job_state(event_id: int, status: str, reason: str) -> dict:
    return {"id": event_id, "type": "state", "scope": "job", "status": status, "reason": reason, "node": None,
            "node_rank": None, "rank": None, "attempt": 0, "ts": "2025-01-01T00:00:00+00:00"}


def metric(event_id: int, rank: int, node_rank: int, step: int, second: float, attempt: int = 0) -> dict:
    return {"id": event_id, "type": "metric", "rank": rank, "node_rank": node_rank, "attempt": attempt, "step": step,
            "ts": f"2025-01-01T00:00:{second:06.3f}+00:00"}


# --- the renderer -------------------------------------------------------------------------------
def test_plain_output_prefixes_every_line_with_its_rank_and_prints_job_states():
    console, buffer = plain_console()
    renderer = JobRenderer(console, 7)
    assert not renderer.live
    renderer.handle(detail())
    renderer.handle({"type": "events", "events": [
        job_state(1, "running", "all 4 ranks running"),
        log(2, 0, "epoch 1 loss 0.5"),
        log(3, 3, "Traceback (most recent call last):", stream="stderr", node_rank=1),
        log(4, 1, "[bold]not markup[/bold] and a long line " + "x" * 200),
        log(5, 1, "rank 1: done at step 40"),
        job_state(6, "completed", "every node exited 0"),
    ]})
    assert buffer.getvalue().splitlines() == [
        "== job running: all 4 ranks running",
        "[rank 0] epoch 1 loss 0.5",
        "[rank 3] Traceback (most recent call last):",
        "[rank 1] [bold]not markup[/bold] and a long line " + "x" * 200,
        "[rank 1] rank 1: done at step 40",
        "== job completed: every node exited 0",
    ]
    assert renderer.final_status == "completed" and renderer.finish() == 0
    assert buffer.getvalue().count("== job completed") == 1  # not repeated by finish()


def test_a_straggler_named_and_cleared_is_said_between_the_lines():
    console, buffer = plain_console()
    renderer = JobRenderer(console, 7)
    summary = "rank 3 on machine m2 takes 0.44 s of its own per step against a median of 0.1 s for the other ranks"
    renderer.handle({"type": "events", "events": [
        {"id": 1, "type": "straggler", "state": "named", "summary": summary, "rank": 3, "attempt": 0},
        {"id": 2, "type": "straggler", "state": "cleared", "summary": "rank 3 keeps up again", "rank": 3, "attempt": 0},
    ]})
    assert buffer.getvalue().splitlines() == [f"== straggler: {summary}", "== straggler: rank 3 keeps up again"]


def test_on_a_terminal_ranks_get_colours_and_stderr_lines_are_marked():
    buffer = io.StringIO()
    renderer = JobRenderer(Console(file=buffer, force_terminal=True, color_system="truecolor", width=120), 7, live=False)
    renderer.handle({"type": "events", "events": [log(1, 0, "out"), log(2, 1, "out"), log(3, 1, "err", stream="stderr")]})
    lines = buffer.getvalue().splitlines()
    colour_of = [line.split("[rank")[0] for line in lines]
    assert colour_of[0] != colour_of[1]  # each rank its own colour
    assert lines[1] != lines[2].replace("err", "out")  # stderr text is styled differently
    assert all("\x1b[" in line for line in lines)


def test_preparing_nodes_show_their_state_and_their_own_lines():
    console, buffer = plain_console()
    renderer = JobRenderer(console, 7)
    renderer.handle(detail(status="dispatching"))
    renderer.handle({"type": "events", "events": [
        {"id": 1, "type": "state", "status": "preparing", "reason": "preparing code bundle 3f2a9c1b0000",
         "node_rank": 1, "rank": None, "attempt": 0},
        log(2, None, "Collecting einops", node_rank=1, source="pip"),
        log(3, None, "torchrun: starting", node_rank=1, source="torchrun", stream="stderr"),
        {"id": 4, "type": "state", "scope": "node", "status": "running", "reason": "running", "node_rank": 1,
         "rank": None, "attempt": 0},
    ]})
    assert buffer.getvalue().splitlines() == [
        "-- node 1 (m2) preparing: preparing code bundle 3f2a9c1b0000",
        "[node 1 pip] Collecting einops",
        "[node 1 torchrun] torchrun: starting",
    ]
    assert renderer.nodes[1].status == "running"


def test_node_progress_follows_metrics_with_steps_per_second_and_eta():
    renderer = JobRenderer(plain_console()[0], 7)
    renderer.handle(detail())
    assert renderer.nodes[0].step == 10 and renderer.nodes[1].step is None
    assert renderer.nodes[0].label == "node 0 m1 ranks 0-1"
    # Two ranks per node report the same steps; the rate is timed by the events' timestamps.
    events = [metric(i * 2 + 1, rank, 1, 20 + i * 10, float(i)) for i in range(5) for rank in (2, 3)]
    renderer.handle({"type": "events", "events": events})
    node = renderer.nodes[1]
    assert node.step == 60
    assert node.rate.per_second() == pytest.approx(10.0)
    assert node.fields(renderer.total_steps) == {
        "label": "node 1 m2 ranks 2-3", "state": "running", "steps": "step 60/100", "rate": "10.00 steps/s",
        "eta": "ETA 0:04",
    }
    assert renderer.job.step == 60
    # An older step (a late report) never moves a node back.
    renderer.handle({"type": "events", "events": [metric(99, 2, 1, 30, 9.0)]})
    assert node.step == 60


def test_a_metric_without_a_node_rank_goes_to_the_node_holding_its_rank():
    renderer = JobRenderer(plain_console()[0], 7)
    renderer.handle(detail())
    renderer.handle({"type": "events", "events": [{**metric(1, 3, 0, 33, 1.0), "node_rank": None}]})
    assert renderer.nodes[1].step == 33 and renderer.nodes[0].step == 10


def test_a_new_attempt_replaces_the_nodes_and_old_attempts_do_not_move_them():
    renderer = JobRenderer(plain_console()[0], 7)
    renderer.handle(detail())
    renderer.handle({"type": "events", "events": [metric(1, 0, 0, 50, 1.0, attempt=1)]})
    assert renderer.attempt == 1 and list(renderer.nodes) == [0] and renderer.nodes[0].step == 50
    renderer.handle({"type": "events", "events": [metric(2, 2, 1, 70, 2.0, attempt=0)]})
    assert list(renderer.nodes) == [0] and renderer.job.step == 50
    renderer.handle(detail(attempt=1, nodes=[
        {"node_rank": 0, "machine": {"name": "m3"}, "rank_start": 0, "rank_end": 0, "status": "running", "progress": {}}]))
    assert renderer.nodes[0].label == "node 0 m3 rank 0" and renderer.nodes[0].step == 50


def test_a_job_known_final_only_from_its_snapshot_still_prints_its_end():
    console, buffer = plain_console()
    renderer = JobRenderer(console, 7)
    renderer.handle(detail(status="failed", reason="node 1 (m2) failed: exit 1"))
    assert renderer.final_status == "failed" and renderer.final_event is None
    assert renderer.finish() == 1
    assert buffer.getvalue() == "== job failed: node 1 (m2) failed: exit 1\n"


def test_the_live_block_shows_one_bar_per_node():
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=140)
    with JobRenderer(console, 7) as renderer:
        assert renderer.live
        renderer.handle(detail())
        renderer.handle({"type": "events", "events": [metric(1, 0, 0, 20, 0.0), metric(2, 0, 0, 40, 2.0),
                                                      log(3, 0, "hello")]})
    output = buffer.getvalue()
    for text in ("job #7 demo", "node 0 m1 ranks 0-1", "node 1 m2 ranks 2-3", "step 40/100", "10.00 steps/s",
                 "ETA 0:06", "hello"):
        assert text in output


# --- the follower against a WebSocket server ----------------------------------------------------
Handler = Callable[[ServerConnection, int], None]


@pytest.fixture
def stream_server() -> Iterator[Callable[[list[Handler]], tuple[str, list[str], list[str]]]]:
    """Serves the given handlers, one per connection in turn; records each request's path and
    Authorization header."""
    servers = []

    def start(handlers: list[Handler]) -> tuple[str, list[str], list[str]]:
        paths: list[str] = []
        tokens: list[str] = []

        def handle(connection: ServerConnection) -> None:
            paths.append(connection.request.path)
            tokens.append(connection.request.headers.get("Authorization", ""))
            handlers[min(len(paths), len(handlers)) - 1](connection, len(paths))

        server = serve(handle, "127.0.0.1", 0)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.socket.getsockname()[1]}", paths, tokens

    yield start
    for server in servers:
        server.shutdown()


def send(connection: ServerConnection, message: dict) -> None:
    connection.send(json.dumps(message))


def no_sleep(_: float) -> None:
    pass


def test_the_follower_reconnects_from_its_cursor_without_losing_or_repeating_a_line(stream_server):
    def first(connection: ServerConnection, _: int) -> None:
        send(connection, detail())
        send(connection, {"type": "events", "replay": True, "events": [log(1, 0, "one"), log(2, 1, "two")]})
        send(connection, {"type": "replayed", "last_id": 2})
        send(connection, {"type": "events", "events": [log(3, 0, "three")]})
        # ...and the link drops: the server went away mid-job.

    def second(connection: ServerConnection, _: int) -> None:
        send(connection, detail())
        # A replay that overlaps what the client saw must not print twice.
        send(connection, {"type": "events", "replay": True, "events": [log(3, 0, "three"), log(4, 1, "four")]})
        send(connection, {"type": "replayed", "last_id": 4})
        send(connection, {"type": "events", "events": [log(5, 1, "rank 1: done at step 40"),
                                                       job_state(6, "completed", "every node exited 0")]})
        connection.recv()  # held open until the client leaves

    server, paths, tokens = stream_server([first, second])
    console, buffer = plain_console()
    notes, noted = plain_console()
    renderer = JobRenderer(console, 7)
    follower = JobFollower(ApiClient(server, "secret"), 7, renderer, notes, sleep=no_sleep)
    assert follower.run() == 0
    assert buffer.getvalue().splitlines() == [
        "[rank 0] one", "[rank 1] two", "[rank 0] three", "[rank 1] four", "[rank 1] rank 1: done at step 40",
        "== job completed: every node exited 0",
    ]
    assert paths == ["/api/jobs/7/stream?after=0", "/api/jobs/7/stream?after=3"]
    assert tokens == ["Token secret", "Token secret"]
    assert "reconnecting" in noted.getvalue()


def test_dropped_for_falling_behind_it_resumes_at_once_from_its_cursor(stream_server):
    def first(connection: ServerConnection, _: int) -> None:
        send(connection, detail())
        send(connection, {"type": "replayed", "last_id": 0})
        send(connection, {"type": "events", "prev": 0, "last": 2, "count": 2,
                          "events": [log(1, 0, "one"), log(2, 1, "two")]})
        connection.close(code=CLOSE_RESUME)  # the server held too much this client had not read

    def second(connection: ServerConnection, _: int) -> None:
        send(connection, detail())
        send(connection, {"type": "events", "replay": True, "events": [log(3, 0, "three")]})
        send(connection, {"type": "replayed", "last_id": 3})
        send(connection, {"type": "events", "events": [job_state(4, "completed", "every node exited 0")]})
        connection.recv()

    def never(_: float) -> None:
        raise AssertionError("a resume must not wait")

    server, paths, _ = stream_server([first, second])
    console, buffer = plain_console()
    notes, noted = plain_console()
    assert JobFollower(ApiClient(server, "t"), 7, JobRenderer(console, 7), notes, sleep=never).run() == 0
    assert buffer.getvalue().splitlines() == ["[rank 0] one", "[rank 1] two", "[rank 0] three",
                                              "== job completed: every node exited 0"]
    assert paths == ["/api/jobs/7/stream?after=0", "/api/jobs/7/stream?after=2"]
    assert "resuming after event 2" in noted.getvalue()


def test_a_job_that_ended_before_its_final_event_arrives_ends_after_a_grace(stream_server, monkeypatch):
    def handler(connection: ServerConnection, _: int) -> None:
        send(connection, detail(status="stopped", reason="stopped by alice"))
        send(connection, {"type": "replayed", "last_id": 0})
        connection.recv()

    server, _, _ = stream_server([handler])
    console, buffer = plain_console()
    monkeypatch.setattr(JobFollower, "GRACE_S", 0.2)
    assert JobFollower(ApiClient(server, "t"), 7, JobRenderer(console, 7), console, sleep=no_sleep).run() == 1
    assert buffer.getvalue() == "== job stopped: stopped by alice\n"


@pytest.mark.parametrize(("code", "message"), [(4401, "refused the API token"), (4404, "job 7: no such job")])
def test_refusals_end_the_follow_without_retrying(stream_server, code: int, message: str):
    def refuse(connection: ServerConnection, _: int) -> None:
        connection.close(code=code)

    server, paths, _ = stream_server([refuse])
    console, _ = plain_console()
    with pytest.raises(CliError, match=message):
        JobFollower(ApiClient(server, "t"), 7, JobRenderer(console, 7), console, sleep=no_sleep).run()
    assert len(paths) == 1


def test_a_server_that_stays_away_is_given_up_on(monkeypatch):
    clock = iter(range(0, 10_000, 60))
    console, _ = plain_console()
    follower = JobFollower(ApiClient("http://127.0.0.1:9", "t"), 7, JobRenderer(console, 7), console,
                           clock=lambda: float(next(clock)), sleep=no_sleep)
    with pytest.raises(CliError, match="lost the job stream .*torchyard logs 7 --follow"):
        follower.run()


def test_ctrl_c_detaches_and_says_how_to_stop_the_job(monkeypatch):
    def interrupted(self: JobFollower) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(follow.JobFollower, "run", interrupted)
    console, _ = plain_console()
    notes, noted = plain_console()
    assert follow_job(ApiClient("http://127.0.0.1:9", "t"), 7, console, notes) == 130
    assert "job 7 keeps running" in noted.getvalue() and "torchyard stop 7" in noted.getvalue()

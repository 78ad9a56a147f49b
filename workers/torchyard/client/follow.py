"""Following a job live: its WebSocket stream shown as logs, state lines and one progress bar per node.

`JobRenderer` turns the stream's messages into output and knows nothing of the network (tests feed
it dicts). `JobFollower` owns the connection: it reconnects with backoff from the last event id it
saw, so a dropped link neither loses nor repeats a line, and it decides when the job is over.

Messages (backend/torchyard_server/live/consumers.py): `{"type": "job", "job": <job detail>}`
on connect and on every change, `{"type": "events", "events": [...]}` (replayed from the database
after the cursor, then live), and `{"type": "replayed", "last_id": N}` between the two.
"""

from __future__ import annotations

import json
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from types import TracebackType
from typing import Any, TypedDict

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text
from websockets.exceptions import ConnectionClosed, InvalidStatus, InvalidURI, WebSocketException
from websockets.sync.client import connect as ws_connect

from .. import stream_contract as wire
from ..stream_contract import CLOSE_NOT_FOUND, CLOSE_RESUME, CLOSE_UNAUTHENTICATED
from . import CliError
from .http import ApiClient
from .output import say

# Exit codes of a followed job's final state.
FINAL = {"completed": 0, "failed": 1, "stopped": 1}
RANK_COLOURS = ("cyan", "green", "magenta", "yellow", "blue", "bright_cyan", "bright_green", "bright_magenta",
                "bright_yellow", "bright_blue")
STATE_STYLES = {
    "completed": "green", "running": "cyan", "preparing": "yellow", "launching": "yellow", "pending": "dim",
    "failed": "bold red", "lost": "bold red", "stopped": "red", "stopping": "red", "recovering": "yellow",
    "queued": "dim", "planning": "dim", "dispatching": "yellow", "preempting": "yellow", "preempted": "dim",
}
# Node transitions worth a line of their own; the others only move the node's bar.
NOTED_NODE_STATES = {"preparing", "failed", "lost", "stopped"}
NODE_FINAL = {"completed", "failed", "lost", "stopped"}
RATE_WINDOW_S = 60.0


def _timestamp(value: Any) -> float | None:
    """An event's `ts` (ISO 8601 from the server, or epoch seconds) as epoch seconds."""
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value).timestamp()
        except ValueError:
            return None
    return None


def _duration(seconds: float) -> str:
    seconds = int(round(seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}:{rest // 60:02d}:{rest % 60:02d}" if hours else f"{rest // 60}:{rest % 60:02d}"


class StepRate:
    """Steps per second over the last minute of reports, timed by the events' own timestamps: a
    replay delivers minutes of reports in one message, and wall-clock arrival would make that a
    burst of thousands of steps per second."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, ts: float, step: int) -> None:
        if self._samples and step <= self._samples[-1][1]:
            return  # the other ranks of a node report the same steps
        self._samples.append((ts, step))
        while len(self._samples) > 2 and self._samples[0][0] < ts - RATE_WINDOW_S:
            self._samples.popleft()

    def per_second(self) -> float | None:
        if len(self._samples) < 2:
            return None
        (t0, s0), (t1, s1) = self._samples[0], self._samples[-1]
        return (s1 - s0) / (t1 - t0) if t1 > t0 else None


class RowFields(TypedDict):
    """The texts of a row's columns (the progress bars' task fields)."""

    label: str
    state: str
    steps: str
    rate: str
    eta: str


@dataclass
class Row:
    """One progress bar: the job's or a node's state, step and speed."""

    status: str = "pending"
    step: int | None = None
    rate: StepRate = field(default_factory=StepRate)

    def advance(self, step: int, ts: float | None) -> None:
        """A reported step; steps only move forward within an attempt."""
        if self.step is None or step > self.step:
            self.step = step
        if ts is not None:
            self.rate.add(ts, step)

    @property
    def label(self) -> str:
        return ""

    def fields(self, total: int | None) -> RowFields:
        """The texts of this row's columns, given the job's total steps (None when unknown)."""
        step = "-" if self.step is None else str(self.step)
        rate = self.rate.per_second() if self.status not in NODE_FINAL | set(FINAL) else None
        eta = ""
        if rate and total is not None and self.step is not None:
            eta = f"ETA {_duration(max(0, total - self.step) / rate)}"
        return {
            "label": self.label,
            "state": self.status,
            "steps": f"step {step}/{total}" if total is not None else f"step {step}",
            "rate": f"{rate:.2f} steps/s" if rate else "",
            "eta": eta,
        }


@dataclass
class NodeRow(Row):
    node_rank: int = 0
    machine: str = "?"
    rank_start: int | None = None
    rank_end: int | None = None

    @property
    def label(self) -> str:
        if self.rank_start is None:
            ranks = ""
        elif self.rank_end is None or self.rank_end == self.rank_start:
            ranks = f" rank {self.rank_start}"
        else:
            ranks = f" ranks {self.rank_start}-{self.rank_end}"
        return f"node {self.node_rank} {self.machine}{ranks}"


@dataclass
class JobRow(Row):
    job_id: int = 0
    name: str = ""

    @property
    def label(self) -> str:
        return f"job #{self.job_id} {self.name[:30]}".rstrip()


class _StateColumn(ProgressColumn):
    def render(self, task: Task) -> Text:
        state = str(task.fields.get("state", ""))
        return Text(state, style=STATE_STYLES.get(state, ""))


class JobRenderer:
    """Renders one job's stream messages. On a terminal it keeps a live block of progress bars (the
    job, then one per node of the current attempt) with the log printed above it; anywhere else
    (a pipe, a file, a test) it prints plain lines only: `[rank N] line`, `== job <status>: <reason>`.

    Use it as a context manager to start and stop the live block."""

    def __init__(self, console: Console, job_id: int, *, live: bool | None = None) -> None:
        self.console = console
        self.job = JobRow(job_id=job_id)
        self.nodes: dict[int, NodeRow] = {}
        self.attempt = 0
        self.total_steps: int | None = None
        self.detail_status: str | None = None  # from the latest job snapshot
        self.detail_reason = ""
        self.final_event: wire.StateEvent | None = None  # the job's final `state` event, once seen
        self._progress: Progress | None = None
        if console.is_terminal if live is None else live:
            self._progress = Progress(
                TextColumn("{task.fields[label]}", markup=False), _StateColumn(), BarColumn(bar_width=30),
                TextColumn("{task.fields[steps]}", markup=False), TextColumn("{task.fields[rate]}", markup=False),
                TextColumn("{task.fields[eta]}", markup=False), console=console, refresh_per_second=4,
            )
        self._tasks: dict[int | None, TaskID] = {}  # None: the job's own row

    @property
    def live(self) -> bool:
        """Whether this renderer keeps a live block of progress bars on its console."""
        return self._progress is not None

    def __enter__(self) -> JobRenderer:
        if self._progress is not None:
            self._progress.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop the live block, leaving its last state on screen."""
        if self._progress is not None:
            self._refresh()
            self._progress.stop()

    # --- messages ---------------------------------------------------------------------------------
    def handle(self, message: wire.JobStreamMessage) -> None:
        """Render one stream message (unknown types are ignored)."""
        if message["type"] == wire.JOB:
            self._job(message.get("job") or {})
        elif message["type"] == wire.EVENTS:
            for event in message.get("events") or []:
                self.event(event)
        self._refresh()

    def events(self, events: list[wire.JobEvent]) -> None:
        """Render a page of events (GET /api/jobs/{id}/logs), as a frame of them."""
        for event in events:
            self.event(event)
        self._refresh()

    def event(self, event: wire.JobEvent) -> None:
        """Render one event: a log line, a state change, a metric (moves the bars), a straggler."""
        if event["type"] == "log":
            self._log(event)
        elif event["type"] == "state":
            self._state(event)
        elif event["type"] == "metric":
            self._metric(event)
        elif event["type"] == "straggler":
            named = event.get("state") == "named"
            say(self.console, f"== straggler: {event.get('summary')}", style="yellow" if named else "")

    @property
    def final_status(self) -> str | None:
        """The job's final status once it is over (from its final event, or the snapshot), else None."""
        if self.final_event is not None:
            return str(self.final_event.get("status"))
        return self.detail_status if self.detail_status in FINAL else None

    def finish(self) -> int:
        """Close the display of a finished job and return the exit code of its final status."""
        status = self.final_status or "failed"
        self.stop()
        if self.final_event is None:
            self._say_job_state(status, self.detail_reason)
        return FINAL.get(status, 1)

    # --- parts ------------------------------------------------------------------------------------
    def _job(self, detail: wire.JobDetail) -> None:
        self.detail_status = detail.get("status")
        self.detail_reason = detail.get("status_reason") or ""
        self.job.name = detail.get("name") or self.job.name
        self.job.status = self.detail_status or self.job.status
        progress = detail.get("progress") or {}
        total = progress.get("total_steps")
        self.total_steps = total if isinstance(total, int) else None
        attempt = detail.get("attempt") or 0
        if attempt > self.attempt:
            self._new_attempt(attempt)
        if isinstance(progress.get("step"), int):
            self.job.advance(progress["step"], None)
        if attempt != self.attempt:
            return  # an older snapshot than the events already seen
        for data in detail.get("nodes") or []:
            node = self._node(int(data["node_rank"]))
            node.machine = (data.get("machine") or {}).get("name") or node.machine
            node.rank_start, node.rank_end = data.get("rank_start"), data.get("rank_end")
            node.status = data.get("status") or node.status
            step = (data.get("progress") or {}).get("step")
            if isinstance(step, int):
                node.advance(step, None)

    def _new_attempt(self, attempt: int) -> None:
        """A recovery relaunched the job: new nodes (maybe on other machines), steps from the checkpoint."""
        self.attempt = attempt
        self.nodes.clear()
        self.job.step, self.job.rate = None, StepRate()

    def _node(self, node_rank: int) -> NodeRow:
        if node_rank not in self.nodes:
            self.nodes[node_rank] = NodeRow(node_rank=node_rank)
        return self.nodes[node_rank]

    def _node_of(self, event: wire.JobEvent) -> NodeRow | None:
        """The row of the node an event comes from (by its node rank, else by the node whose ranks
        hold its rank); None for earlier attempts' events and events of no node."""
        attempt = event.get("attempt")
        if isinstance(attempt, int):
            if attempt > self.attempt:
                self._new_attempt(attempt)
            elif attempt < self.attempt:
                return None
        node_rank, rank = event.get("node_rank"), event.get("rank")
        if node_rank is not None:
            return self._node(int(node_rank))
        if rank is None:
            return None
        return next((node for node in self.nodes.values()
                     if node.rank_start is not None and node.rank_end is not None
                     and node.rank_start <= rank <= node.rank_end), None)

    def _log(self, event: wire.LogEvent) -> None:
        rank = event.get("rank")
        if rank is not None:
            prefix = Text(f"[rank {rank}]", style=RANK_COLOURS[int(rank) % len(RANK_COLOURS)])
        else:
            # The node's own lines: preparing its code (source prepare/pip), torchrun, the supervisor.
            node_rank, source = event.get("node_rank"), event.get("source")
            where = "job" if node_rank is None else f"node {node_rank}"
            prefix = Text(f"[{where} {source}]" if source else f"[{where}]", style="dim")
        line = Text(str(event.get("line", "")), style="red" if event.get("stream") == "stderr" else "")
        say(self.console, Text.assemble(prefix, " ", line))

    def _state(self, event: wire.StateEvent) -> None:
        status = str(event.get("status"))
        reason = str(event.get("reason") or "")
        if event.get("scope") == "job":
            self.job.status = status
            if status in FINAL:
                self.final_event = event
            self._say_job_state(status, reason)
            return
        node = self._node_of(event)
        if node is None:
            return
        node.status = status
        if status in NOTED_NODE_STATES:
            line = f"-- node {node.node_rank} ({node.machine}) {status}"
            say(self.console, f"{line}: {reason}" if reason else line, style=STATE_STYLES.get(status, ""))

    def _say_job_state(self, status: str, reason: str) -> None:
        style = STATE_STYLES.get(status, "") if status in FINAL else "bold"
        say(self.console, f"== job {status}: {reason}", style=style)

    def _metric(self, event: wire.MetricEvent) -> None:
        step = event.get("step")
        if not isinstance(step, int):
            return
        ts = _timestamp(event.get("ts"))
        node = self._node_of(event)
        if node is not None:
            node.advance(step, ts)
        if event.get("attempt") in (None, self.attempt):
            self.job.advance(step, ts)

    def _refresh(self) -> None:
        """Bring the bars up to date: the job first, then the nodes by rank."""
        if self._progress is None:
            return
        progress = self._progress
        if set(self._tasks) != {None, *self.nodes}:
            # Nodes appeared (or a new attempt replaced them): rebuild so they stay in rank order.
            for task_id in self._tasks.values():
                progress.remove_task(task_id)
            self._tasks = {key: progress.add_task("", total=None, **self._row(key).fields(None))
                           for key in [None, *sorted(self.nodes)]}
        for key, task_id in self._tasks.items():
            row = self._row(key)
            total = self.total_steps
            if total is None and row.status in FINAL.keys() | NODE_FINAL and row.step:
                total = row.step  # a finished row of unknown length shows a full bar, not a pulse
            progress.update(task_id, completed=row.step or 0, total=total, **row.fields(self.total_steps))

    def _row(self, key: int | None) -> Row:
        return self.job if key is None else self.nodes[key]


@dataclass
class Backoff:
    """Reconnection delays: 0.5 s doubling to 10 s, and how long the link has been down."""

    first_s: float = 0.5
    most_s: float = 10.0
    delay_s: float = 0.0
    down_since: float | None = None

    def failed(self, now: float) -> float:
        """Note a failure at `now`; returns how long to wait before the next try."""
        if self.down_since is None:
            self.down_since = now
        self.delay_s = min(self.most_s, self.delay_s * 2 if self.delay_s else self.first_s)
        return self.delay_s

    def connected(self) -> None:
        self.delay_s, self.down_since = 0.0, None


class JobFollower:
    """Follows one job's stream until it is over; returns the exit code of its final status."""

    # Poll interval of the receive loop, so the end-of-job deadline is noticed without traffic.
    POLL_S = 1.0
    # After the job's final state event: lines still in flight from slower nodes get this long.
    DRAIN_S = 0.5
    # The snapshot says the job is over but its final event has not arrived: wait this long for it.
    GRACE_S = 3.0
    # Down this long without one successful connection: give up (the job keeps running).
    GIVE_UP_S = 300.0
    OPEN_TIMEOUT_S = 15.0
    MAX_MESSAGE_BYTES = 64 << 20  # a replay batch is up to 1000 events of arbitrary log lines

    def __init__(self, api: ApiClient, job_id: int, renderer: JobRenderer, notes: Console, *, after: int = 0,
                 connect: Callable[..., Any] = ws_connect, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.api = api
        self.job_id = job_id
        self.renderer = renderer
        self.notes = notes
        self.cursor = after  # the id of the last event rendered
        self._connect = connect
        self._clock = clock
        self._sleep = sleep

    def run(self) -> int:
        """Follow until the job is final; reconnect on a dropped link, fail on a refused one."""
        backoff = Backoff()
        while True:
            try:
                return self._session(backoff)
            except ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else None
                if code == CLOSE_UNAUTHENTICATED:
                    raise CliError("the server refused the API token on the job stream (see `torchyard token`)") from None
                if code == CLOSE_NOT_FOUND:
                    raise CliError(f"job {self.job_id}: no such job (or not one this token may see)") from None
                if code == CLOSE_RESUME:
                    say(self.notes, f"job stream: fell behind; resuming after event {self.cursor}", style="dim")
                    continue
                problem = f"connection closed ({code or 'no close code'})"
            except InvalidStatus as exc:
                status = exc.response.status_code
                if status in (401, 403, 404):
                    raise CliError(f"the server refused the job stream: HTTP {status}") from None
                problem = f"HTTP {status}"
            except InvalidURI as exc:
                raise CliError(f"bad server URL: {exc}") from None
            except (OSError, WebSocketException) as exc:
                problem = str(exc) or type(exc).__name__
            now = self._clock()
            delay = backoff.failed(now)
            if backoff.down_since is not None and now - backoff.down_since > self.GIVE_UP_S:
                raise CliError(f"lost the job stream at {self.api.server}: {problem}. The job keeps running; "
                               f"follow it again with `torchyard logs {self.job_id} --follow`")
            say(self.notes, f"job stream: {problem}; reconnecting in {delay:.1f}s", style="dim")
            self._sleep(delay)

    def _session(self, backoff: Backoff) -> int:
        url = self.api.websocket_url(f"/api/jobs/{self.job_id}/stream?after={self.cursor}")
        with self._connect(url, additional_headers=self.api.auth_headers(), open_timeout=self.OPEN_TIMEOUT_S,
                           max_size=self.MAX_MESSAGE_BYTES) as ws:
            backoff.connected()
            caught_up = False  # everything stored up to the connection has been replayed
            deadline: float | None = None
            while deadline is None or self._clock() < deadline:
                wait = self.POLL_S if deadline is None else max(0.0, deadline - self._clock())
                try:
                    message = json.loads(ws.recv(timeout=wait))
                except TimeoutError:
                    continue
                if message.get("type") == wire.EVENTS:
                    fresh = [e for e in message.get("events") or [] if int(e.get("id") or 0) > self.cursor]
                    if not fresh:
                        continue
                    self.cursor = int(fresh[-1]["id"])
                    message = {**message, "events": fresh}
                elif message.get("type") == wire.REPLAYED:
                    caught_up = True
                self.renderer.handle(message)
                if caught_up and self.renderer.final_status is not None:
                    wait = self.DRAIN_S if self.renderer.final_event is not None else self.GRACE_S
                    end = self._clock() + wait
                    deadline = end if deadline is None else min(deadline, end)
        return self.renderer.finish()


def follow_job(api: ApiClient, job_id: int, console: Console, notes: Console, *, after: int = 0) -> int:
    """Follow a job to its end (exit code 0 completed, 1 failed or stopped). Ctrl-C detaches: the
    job keeps running, and the exit code is 130."""
    with JobRenderer(console, job_id) as renderer:
        # Under a live block, notes go through its console (above the bars); another stream
        # writing to the same terminal would tear the block.
        follower = JobFollower(api, job_id, renderer, console if renderer.live else notes, after=after)
        try:
            return follower.run()
        except KeyboardInterrupt:
            pass
    say(notes, f"detached: job {job_id} keeps running. Follow it again with `torchyard logs {job_id} --follow`; "
               f"stop it with `torchyard stop {job_id}`.")
    return 130

"""Sharing a cluster from the command line: `torchyard queue` (the queued jobs in order, with why
each waits), `torchyard usage` (GPU- and process-hours per project, user or machine) and the
`--priority` / `--time-limit` of `run` and `submit`. The server decides and explains; this shows."""

from __future__ import annotations

import json
import urllib.parse
from datetime import datetime
from typing import Any, NotRequired, TypedDict, TypeVar

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from . import CliError
from .http import ApiClient
from .output import JobShown, say
from .specfile import JobSpecBody

PRIORITY_NAMES = ("low", "normal", "high")


def priority_arg(text: str) -> str | int:
    """`--priority`: low, normal, high or an integer (the server checks the range and the ceiling)."""
    value = text.strip().lower()
    if value in PRIORITY_NAMES:
        return value
    try:
        return int(value)
    except ValueError:
        raise CliError(f"--priority {text}: low, normal, high or an integer") from None


# A spec as its file wrote it (sent as written), or as `torchyard run` built it.
Spec = TypeVar("Spec", JobSpecBody, dict[str, Any])


def apply_queue_options(spec: Spec, *, priority: str | None, time_limit: str | None) -> Spec:
    """A spec with the command line's priority and time limit (they win over the file's)."""
    if priority is not None:
        spec["priority"] = priority_arg(priority)
    if time_limit is not None:
        spec["time_limit"] = int(time_limit) if time_limit.strip().isdigit() else time_limit.strip()
    return spec


def _ago(stamp: str | None, now: datetime) -> str:
    if not stamp:
        return "-"
    seconds = max((now - datetime.fromisoformat(stamp.replace("Z", "+00:00"))).total_seconds(), 0)
    if seconds < 90:
        return f"{seconds:.0f}s"
    if seconds < 5400:
        return f"{seconds / 60:.0f}m"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 86400:.1f}d"


class QueuedJob(TypedDict, total=False):
    """What the queue table shows of an entry of GET /api/queue (the REST schema's QueueEntryOut)."""

    id: int
    name: str
    project: str
    owner: str
    priority: int
    position: int
    reason: str
    head: bool
    borrowing: bool
    waiting_since: str
    gpus: int
    processes: int


class QueueAnswer(TypedDict):
    """GET /api/queue (QueueOut): the queued jobs you can see, and how many there are in all."""

    jobs: list[QueuedJob]
    total: int


class UsageTotal(TypedDict):
    key: str
    gpu_hours: float
    process_hours: float
    nodes: int


class UsageSeries(TypedDict):
    key: str
    gpu_hours: list[float]  # per bucket


class UsageAnswer(TypedDict):
    """GET /api/usage (UsageOut), as the tables read it."""

    by: str
    since: str
    until: str
    bucket: str | None
    totals: list[UsageTotal]
    buckets: NotRequired[list[str]]
    series: NotRequired[list[UsageSeries]]


def queue_table(answer: QueueAnswer, now: datetime) -> Table:
    jobs = answer.get("jobs") or []
    total = answer.get("total", len(jobs))
    title = f"{len(jobs)} queued job(s) you can see" + (f", {total} in the whole queue" if total != len(jobs) else "")
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    for header in ("#", "job", "priority"):
        table.add_column(header, justify="right", no_wrap=True)
    for header in ("name", "project", "owner"):
        table.add_column(header, no_wrap=True, max_width=24)
    table.add_column("asks", no_wrap=True)
    table.add_column("waiting", justify="right", no_wrap=True)
    table.add_column("reason", overflow="fold")
    for entry in jobs:
        asks = f"{entry.get('gpus', 0)} GPU" + ("s" if entry.get("gpus") != 1 else "") if entry.get("gpus") \
            else f"{entry.get('processes', 0)} proc"
        marks = ("head " if entry.get("head") else "") + ("borrowing " if entry.get("borrowing") else "")
        reason = Text(marks, style="bold") + Text(str(entry.get("reason") or ""))
        table.add_row(*(Text(str(v)) for v in (
            entry.get("position"), entry.get("id"), entry.get("priority"), entry.get("name"), entry.get("project"),
            entry.get("owner"), asks, _ago(entry.get("waiting_since"), now))), reason)
    return table


def show_queue(api: ApiClient, console: Console, *, project: str | None, as_json: bool) -> int:
    query = f"?{urllib.parse.urlencode({'project': project})}" if project else ""
    answer = api.call("GET", f"/api/queue{query}")
    if as_json:
        print(json.dumps(answer, indent=2))
        return 0
    if not answer.get("jobs"):
        say(console, "the queue is empty" + (f" for project {project}" if project else "")
            + (f" ({answer['total']} queued job(s) in projects you cannot see)" if answer.get("total") else ""))
        return 0
    console.print(queue_table(answer, datetime.now().astimezone()))
    return 0


def usage_table(answer: UsageAnswer) -> Table:
    title = f"usage by {answer['by']}, {answer['since'][:16]} to {answer['until'][:16]} (UTC)"
    table = Table(title=title, box=box.SIMPLE, title_justify="left")
    table.add_column(str(answer["by"]), no_wrap=True)
    for header in ("GPU-hours", "process-hours", "nodes"):
        table.add_column(header, justify="right", no_wrap=True)
    for row in answer.get("totals") or []:
        table.add_row(Text(str(row["key"])), f"{row['gpu_hours']:.2f}", f"{row['process_hours']:.2f}", str(row["nodes"]))
    return table


def series_table(answer: UsageAnswer) -> Table:
    """With --bucket: GPU-hours per bucket (rows) and key (columns)."""
    series = answer.get("series") or []
    table = Table(title="GPU-hours per " + str(answer.get("bucket")), box=box.SIMPLE, title_justify="left")
    table.add_column("from (UTC)", no_wrap=True)
    for item in series:
        table.add_column(Text(str(item["key"])), justify="right", no_wrap=True)
    for index, start in enumerate(answer.get("buckets") or []):
        table.add_row(start[:16].replace("T", " "), *(f"{item['gpu_hours'][index]:.2f}" for item in series))
    return table


def show_usage(api: ApiClient, console: Console, *, by: str, since: str | None, until: str | None,
               bucket: str | None, project: str | None, as_json: bool) -> int:
    params = {key: value for key, value in (("by", by), ("since", since), ("until", until), ("bucket", bucket),
                                            ("project", project)) if value}
    answer = api.call("GET", "/api/usage?" + urllib.parse.urlencode(params))
    if as_json:
        print(json.dumps(answer, indent=2))
        return 0
    if not answer.get("totals"):
        say(console, f"no usage from {answer['since'][:16]} to {answer['until'][:16]} (UTC)")
        return 0
    console.print(usage_table(answer))
    if bucket:
        console.print(series_table(answer))
    return 0


def set_priority(api: ApiClient, job_id: int, priority: str) -> JobShown:
    return api.call("PATCH", f"/api/jobs/{job_id}", {"priority": priority_arg(priority)})

"""`torchyard monitor [--worker NAME] [--refresh 1]`: the Go scheduler's monitoring client, a live terminal
view of the machines (or one) with their status and GPUs (model, memory, use) and the task on each
GPU, redrawn every `--refresh` seconds until Ctrl-C.

It reads the REST API as any client does: `GET /api/machines` (status, what each agent reports) and
the jobs the token may see (`GET /api/jobs`, then each live job's nodes and their GPUs). A GPU held
by a job the token may not see shows as in use, with its project (`usage` of the machine).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from torchyard.protocol import GpuInfo

from . import CliError
from .http import ApiClient

LIVE_JOB = {"planning", "dispatching", "running", "recovering", "preempting", "stopping"}
LIVE_NODE = {"pending", "launching", "preparing", "running"}
MAX_JOBS = 100  # live jobs whose nodes are looked up per refresh
STATUS_STYLE = {"online": "green", "busy": "cyan", "draining": "yellow", "quarantined": "magenta", "offline": "red",
                "pending": "dim"}


class MachineCapsShown(TypedDict, total=False):
    """What the view reads of a machine's capabilities (its agent's, protocol.Capabilities)."""

    cpu_count: int
    gpus: list[GpuInfo]
    gpus_declared: bool
    gpus_detected: list[GpuInfo]
    gpu_warnings: list[str]


class MachineLoadShown(TypedDict, total=False):
    cpu_usage: float  # percent
    memory_usage: float
    gpu_usage: list[float]  # by position in the capabilities' gpus


class ProjectGpus(TypedDict):
    """GPUs one project's live nodes hold on the machine (an item of MachineOut's `usage`)."""

    project: str
    gpus: int


class MachineShown(TypedDict, total=False):
    """What the view reads of a machine of GET /api/machines (the REST schema's MachineOut)."""

    id: int
    name: str
    host: str
    status: str
    quarantined_at: str | None
    last_heartbeat: str | None  # ISO 8601
    capabilities: MachineCapsShown
    current_load: MachineLoadShown
    usage: list[ProjectGpus]


@dataclass
class Task:
    """One live node of a job, as the monitor shows it on its machine."""

    job_id: int
    job_name: str
    job_status: str
    node_rank: int
    nproc: int
    gpus: list[int]
    step: int | None = None
    total_steps: int | None = None

    def label(self) -> str:
        where = f" step {self.step}/{self.total_steps or '?'}" if self.step is not None else ""
        return f"#{self.job_id} {self.job_name} node {self.node_rank} ({self.job_status}{where})"


@dataclass
class Snapshot:
    machines: list[MachineShown]
    tasks: dict[int, list[Task]] = field(default_factory=dict)  # machine id -> its live nodes
    taken_at: float = field(default_factory=time.time)


def _tasks(api: ApiClient) -> dict[int, list[Task]]:
    jobs = [j for j in api.call("GET", "/api/jobs?limit=1000") if j["status"] in LIVE_JOB][:MAX_JOBS]
    tasks: dict[int, list[Task]] = {}
    for summary in jobs:
        try:
            job = api.call("GET", f"/api/jobs/{summary['id']}")
        except CliError:
            continue  # ended and purged between the two calls
        for node in job.get("nodes") or []:
            machine_id = (node.get("machine") or {}).get("id")
            if node["attempt"] != job["attempt"] or node["status"] not in LIVE_NODE or machine_id is None:
                continue
            progress = node.get("progress") or {}
            tasks.setdefault(machine_id, []).append(Task(
                job_id=job["id"], job_name=job["name"], job_status=job["status"], node_rank=node["node_rank"],
                nproc=node["nproc"], gpus=list(node.get("gpus") or []), step=progress.get("step"),
                total_steps=progress.get("total_steps") or (job.get("progress") or {}).get("total_steps")))
    return tasks


def find_worker(machines: list[MachineShown], worker: str) -> MachineShown | None:
    """The machine named `worker` (or of that id)."""
    return next((m for m in machines if m["name"] == worker or str(m["id"]) == worker), None)


def fetch(api: ApiClient, worker: str | None = None) -> Snapshot:
    """What the view shows now; a CliError when the server cannot say (or has no such machine)."""
    machines: list[MachineShown] = api.call("GET", "/api/machines")
    if worker is not None:
        found = find_worker(machines, worker)
        if found is None:
            names = ", ".join(m["name"] for m in machines) or "none yet"
            raise CliError(f"--worker {worker}: no such machine (machines: {names})")
        machines = [found]
    return Snapshot(machines, _tasks(api))


def _memory(mb: int) -> str:
    return f"{mb / 1024:.0f} GB" if mb >= 1024 else f"{mb} MB"


def _age(iso: str | None, now: float) -> str:
    if not iso:
        return "never"
    seconds = max(now - datetime.fromisoformat(iso.replace("Z", "+00:00")).timestamp(), 0)
    return f"{seconds:.0f}s ago" if seconds < 120 else f"{seconds / 60:.0f} min ago"


def _percent(value: Any) -> str:
    return f"{value:.0f}%" if isinstance(value, (int, float)) else "-"


def render_machine(machine: MachineShown, tasks: list[Task], now: float) -> Panel:
    caps = machine.get("capabilities") or MachineCapsShown()
    load = machine.get("current_load") or MachineLoadShown()
    status = machine["status"] + (" (quarantined)" if machine.get("quarantined_at") and machine["status"] != "quarantined"
                                  else "")
    header = Text.assemble(
        (machine["name"], "bold"), "  ", (status, STATUS_STYLE.get(machine["status"], "")),
        f"  {machine['host']}  cpu {_percent(load.get('cpu_usage'))} of {caps.get('cpu_count', '?')}"
        f"  mem {_percent(load.get('memory_usage'))}  heartbeat {_age(machine.get('last_heartbeat'), now)}",
    )
    parts: list[RenderableType] = [header]
    gpus = caps.get("gpus") or []
    on_gpu = {index: task for task in tasks for index in task.gpus}
    usage = list(load.get("gpu_usage") or [])
    # GPUs held here by jobs this token may not see: counted per project by the server.
    hidden = [u for u in machine.get("usage") or [] if u.get("gpus")]
    hidden_gpus = sum(u["gpus"] for u in hidden) - len(on_gpu)
    if gpus:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="dim")
        for column in ("GPU", "model", "memory", "use", "task"):
            table.add_column(column)
        for position, gpu in enumerate(gpus):
            task = on_gpu.get(gpu["index"])
            if task is not None:
                held = task.label()
            elif hidden_gpus > 0:
                hidden_gpus -= 1
                held = "in use (" + ", ".join(u["project"] for u in hidden) + ")"
            else:
                held = "free"
            table.add_row(str(gpu["index"]), str(gpu.get("name") or "GPU"), _memory(int(gpu.get("memory_mb") or 0)),
                          _percent(usage[position]) if position < len(usage) else "-",
                          Text(held, style="dim" if held == "free" else ""))
        parts.append(table)
    else:
        parts.append(Text("no GPUs", style="dim"))
    for task in tasks:
        if not task.gpus:
            parts.append(Text(f"cpu: {task.label()}, {task.nproc} process{'' if task.nproc == 1 else 'es'}"))
    if caps.get("gpus_declared"):
        parts.append(Text(f"GPUs declared by its agent ({len(caps.get('gpus_detected') or [])} seen by NVML)",
                          style="dim"))
    for warning in caps.get("gpu_warnings") or []:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    return Panel(Group(*parts), expand=True)


def render(snapshot: Snapshot, *, server: str, refresh: float, problem: str = "") -> RenderableType:
    now = time.time()
    title = Text.assemble(
        ("torchyard monitor", "bold"),
        f"  {server}  {len(snapshot.machines)} machine{'' if len(snapshot.machines) == 1 else 's'}"
        f"  updated {datetime.fromtimestamp(snapshot.taken_at).strftime('%H:%M:%S')}"
        f"  every {refresh:g}s, Ctrl-C to quit",
    )
    parts: list[RenderableType] = [title]
    if problem:
        parts.append(Text(f"{problem} (retrying)", style="red"))
    if not snapshot.machines:
        parts.append(Text("no machines yet: add one (POST /api/machines, or the dashboard) and start its agent"))
    parts.extend(render_machine(m, snapshot.tasks.get(m["id"], []), now) for m in snapshot.machines)
    return Group(*parts)


def monitor(api: ApiClient, console: Console, *, worker: str | None = None, refresh: float = 1.0,
            once: bool = False) -> int:
    """Draw the view until Ctrl-C (or once). A server that stops answering is retried, the last
    view kept on screen with the error above it; a refused token or a missing machine ends it.
    Where the output is no terminal (a pipe, a log file), each refresh prints the view again."""
    snapshot = fetch(api, worker)
    if once:
        console.print(render(snapshot, server=api.server, refresh=refresh))
        return 0

    def refreshed() -> RenderableType:
        nonlocal snapshot
        time.sleep(refresh)
        problem = ""
        try:
            snapshot = fetch(api, worker)
        except CliError as exc:
            if "HTTP 401" in str(exc) or "HTTP 403" in str(exc):
                raise
            problem = str(exc).splitlines()[0]
        return render(snapshot, server=api.server, refresh=refresh, problem=problem)

    try:
        if not console.is_terminal:
            console.print(render(snapshot, server=api.server, refresh=refresh))
            while True:
                console.print(refreshed())
        with Live(render(snapshot, server=api.server, refresh=refresh), console=console,
                  auto_refresh=False, transient=False) as live:
            while True:
                live.update(refreshed(), refresh=True)
    except KeyboardInterrupt:
        return 0

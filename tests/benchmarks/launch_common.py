"""Shared by bench_launch.py and bench_recovery.py: a production-shaped stack, the by-hand baseline
(two torchrun commands started as the supervisor would start them), and first-metric detection.

Not a bench itself (run.py only discovers bench_*.py).

- `bench_stack(work)`: `torchyard-server run` (tests/integration/stack.py) with two local agents, a
  fresh PostgreSQL database of its own and the launcher's own Redis: the shared test Redis database
  is emptied by every integration test module that starts, which would wipe a bench's queues.
- `hand_launch(work, args)`: the same script (examples/mlp_ddp.py), the same torchrun argv and the
  same environment the supervisor builds (`build_torchrun_argv`, `build_env`), with a static master
  address and port on 127.0.0.1, minus the event socket, so that `sdk.report()` prints its
  `[torchyard] step=...` line instead; returns the seconds from the first `Popen` to the first step
  line of every rank, read from torchrun's per-rank stdout files (`--log-dir`, `--redirects 3`).
- `first_metrics(stack, job, attempt)`: each rank's first metric event of an attempt, by the rank's
  own timestamp (the SDK stamps `ts` when `report()` is called), so the API's polling adds nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
for _path in (ROOT / "tests", ROOT / "backend", ROOT / "workers"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

import psutil  # noqa: E402
from integration.databases import database  # noqa: E402
from integration.stack import Stack, start_stack, unique_name  # noqa: E402
from torchyard import protocol  # noqa: E402
from torchyard.protocol import NodeLaunch  # noqa: E402
from torchyard.supervisor.argv import (  # noqa: E402
    CONFIG_FILE,
    OUTPUT_DIR,
    TORCHRUN_LOG_DIR,
    TORCHRUN_LOG_FILE,
    build_env,
    build_torchrun_argv,
    default_code_root,
    link_sdk,
    resolve_entrypoint,
)

SCRIPT = "examples/mlp_ddp.py"
NODES, PROCS = 2, 2
WORLD = NODES * PROCS
STEP_LINE = "[torchyard] step="  # what sdk.report() prints without the event socket
POLL_S = 0.02


# --- the stack -----------------------------------------------------------------------------------
@contextlib.contextmanager
def bench_stack(work: Path, env: dict[str, str] | None = None, agents: int = 2) -> Iterator[Stack]:
    """A running stack with two local agents (or `agents`); stopped and its database dropped afterwards."""
    with database(unique_name("torchyard_bench")) as url:
        (work / "stack").mkdir(parents=True, exist_ok=True)
        stack = start_stack(work / "stack", env={"DATABASE_URL": url, **(env or {})}, agents=agents)
        try:
            yield stack
        finally:
            stack.stop()


def job_spec(name: str, args: list[str], **extra: Any) -> dict[str, Any]:
    return {"name": name, "entrypoint": SCRIPT, "resources": {"nodes": NODES, "procs_per_node": PROCS},
            "args": args, **extra}


def ts(event: dict[str, Any]) -> float:
    """An event's timestamp as seconds since the epoch."""
    return datetime.fromisoformat(event["ts"]).timestamp()


class EventReader:
    """Reads one job's events incrementally (each poll asks only for what is new)."""

    def __init__(self, stack: Stack, job_id: int) -> None:
        self.stack, self.job_id, self.after, self.events = stack, job_id, 0, []

    def poll(self) -> list[dict[str, Any]]:
        new = []
        while True:
            page = self.stack.api("GET", f"/api/jobs/{self.job_id}/events", params={"after": self.after}).json()
            if not page["events"]:
                break
            new.extend(page["events"])
            self.after = page["next_after"]
        self.events.extend(new)
        return new

    def job_states(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["type"] == "state" and e.get("scope") == "job"]

    def first_metric_ts(self, attempt: int) -> dict[int, float]:
        """Each rank's first metric of the attempt, by the rank's own timestamp."""
        first: dict[int, float] = {}
        for e in self.events:
            if e["type"] == "metric" and e["attempt"] == attempt and e.get("rank") is not None:
                first[e["rank"]] = min(first.get(e["rank"], float("inf")), ts(e))
        return first


def first_metrics(stack: Stack, job_id: int, attempt: int, *, reader: EventReader | None = None,
                  timeout: float = 180.0, poll_s: float = 0.5, world: int = WORLD) -> tuple[EventReader, dict[int, float]]:
    """Wait until every rank of the attempt (`world` of them) has reported a metric; (reader, rank ->
    first ts). Polls gently: the timestamps are the ranks' own, the poll interval does not enter them."""
    reader = reader or EventReader(stack, job_id)
    deadline = time.monotonic() + timeout
    while True:
        reader.poll()
        first = reader.first_metric_ts(attempt)
        if len(first) >= world:
            return reader, first
        failed = [e for e in reader.job_states() if e["status"] in ("failed", "stopped", "completed")]
        if failed or time.monotonic() > deadline:
            raise AssertionError(
                f"job {job_id} attempt {attempt}: first metrics from ranks {sorted(first)} only "
                f"({[(e['status'], e.get('reason')) for e in failed]})\n{stack.job_log_tail(job_id)}\n"
                f"--- stack log ---\n{stack.log_tail()}")
        time.sleep(poll_s)


def kill_rank(stack: Stack, job_id: int, attempt: int, rank: int) -> float:
    """SIGKILL the training process of `rank` in `attempt` (not torchrun, nor an in_place job's
    lighthouse, which has no RANK); returns the time just before the signal."""
    victims = []
    for proc in stack.job_processes(job_id):
        try:
            environ, cmdline = proc.environ(), " ".join(proc.cmdline())
        except psutil.Error:
            continue
        if (environ.get("TORCHYARD_ATTEMPT") == str(attempt) and environ.get("RANK") == str(rank)
                and "torch.distributed.run" not in cmdline):
            victims.append(proc)
    assert len(victims) == 1, f"rank {rank} of job {job_id}: {victims}\n{stack.log_tail()}"
    killed = time.time()
    victims[0].send_signal(signal.SIGKILL)
    return killed


def end_job(stack: Stack, job_id: int, timeout: float = 90.0) -> None:
    """Stop the job unless it ended already; wait until it is final and none of its processes is left."""
    if stack.job(job_id)["status"] not in ("completed", "failed", "stopped"):
        stack.api("POST", f"/api/jobs/{job_id}/stop")
    stack.wait_job(job_id, {"completed", "failed", "stopped"}, timeout=timeout)
    left = stack.wait_no_job_processes(job_id, timeout=30)
    assert not left, f"job {job_id} left processes behind: {[p.pid for p in left]}"


# --- by hand -------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _kill_tree(proc: subprocess.Popen) -> None:
    """End one torchrun we started, with its workers (they live in sessions of their own)."""
    with contextlib.suppress(psutil.Error):
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        for p in tree:
            with contextlib.suppress(psutil.Error):
                p.send_signal(signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=10)


def _start_pair(base: Path, args: list[str]) -> list[subprocess.Popen]:
    """Start node 0's and node 1's torchrun, each as the supervisor would start it (argv, environment,
    config file, SDK path, working directory), on 127.0.0.1 with a static master port."""
    script = resolve_entrypoint(SCRIPT, default_code_root())
    port = free_port()
    base_env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    commands = []
    for node_rank in range(NODES):
        launch = NodeLaunch(
            job_id=0, attempt=0, node_id=0, node_rank=node_rank, nnodes=NODES, nproc_per_node=PROCS,
            world_size=WORLD, master_addr="127.0.0.1", master_port=port, entrypoint=SCRIPT, args=list(args),
            config={"backend": "gloo", "job_name": "by-hand"}, checkpoint_url=str(base / "store"), backend="gloo",
        )
        run_dir = base / f"node-{node_rank}"
        run_dir.mkdir(parents=True)
        # What the supervisor's _start_torchrun does first, minus the event socket.
        (run_dir / CONFIG_FILE).write_text(json.dumps(launch.config))
        (run_dir / OUTPUT_DIR).mkdir()
        link_sdk(run_dir)
        env = build_env(launch, run_dir, base_env)
        env.pop(protocol.ENV_EVENT_SOCKET)  # no socket: report() prints its step line
        commands.append((run_dir, build_torchrun_argv(launch, run_dir, script, python=sys.executable), env))
    procs: list[subprocess.Popen] = []
    try:
        for run_dir, argv, env in commands:
            with open(run_dir / TORCHRUN_LOG_FILE, "wb") as output:
                procs.append(subprocess.Popen(argv, env=env, cwd=run_dir, stdin=subprocess.DEVNULL, stdout=output,
                                              stderr=subprocess.STDOUT, start_new_session=True))
    except BaseException:
        for proc in procs:
            _kill_tree(proc)
        raise
    return procs


def hand_launch(work: Path, args: list[str], *, timeout: float = 120.0) -> float:
    """Two torchrun commands (node 0 and node 1, 2 processes each) built exactly as the supervisor
    builds them. Returns the seconds from the first Popen to the moment every rank's first step line
    was seen; waits for both to exit (give args that end the run soon)."""
    base = work / f"hand-{uuid.uuid4().hex[:8]}"
    started = time.time()
    procs = _start_pair(base, args)
    try:
        seen = _wait_step_lines(base, procs, timeout)
        elapsed = max(seen.values()) - started
        for proc in procs:
            code = proc.wait(timeout=60)
            assert code == 0, f"by-hand torchrun exited {code}: {_tail(base)}"
        return elapsed
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill_tree(proc)


def _wait_step_lines(base: Path, procs: list[subprocess.Popen], timeout: float) -> dict[int, float]:
    """Global rank -> when its first step line appeared in its stdout file (polled every 20 ms)."""
    offsets: dict[Path, int] = {}
    partial: dict[Path, bytes] = {}
    seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while len(seen) < WORLD:
        for node_rank in range(NODES):
            for path in (base / f"node-{node_rank}" / TORCHRUN_LOG_DIR).glob("*/attempt_0/*/stdout.log"):
                rank = node_rank * PROCS + int(path.parent.name)
                if rank in seen:
                    continue
                with open(path, "rb") as handle:
                    handle.seek(offsets.get(path, 0))
                    chunk = handle.read()
                now = time.time()
                offsets[path] = offsets.get(path, 0) + len(chunk)
                data = partial.get(path, b"") + chunk
                lines = data.split(b"\n")
                partial[path] = lines.pop()
                if any(line.startswith(STEP_LINE.encode()) for line in lines):
                    seen[rank] = now
        bad = [p.returncode for p in procs if p.poll() not in (None, 0)]
        if bad or time.monotonic() > deadline:
            raise AssertionError(f"by-hand ranks {sorted(seen)} printed a step only (exit codes {bad}): {_tail(base)}")
        if len(seen) < WORLD:
            time.sleep(POLL_S)
    return seen


def _tail(base: Path, lines: int = 30) -> str:
    out = []
    for path in sorted(base.glob("node-*/torchrun.log")) + sorted(base.glob("node-*/torchrun/*/attempt_0/*/std*.log")):
        text = path.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {path.relative_to(base)}\n" + "\n".join(text))
    return "\n".join(out)


# --- tables --------------------------------------------------------------------------------------
def med(values: list[float]) -> float:
    return statistics.median(values)


def summary_row(label: str, values: list[float], baseline: float | None = None, width: int = 30) -> str:
    ratio = f"{med(values) / baseline:>8.2f}" if baseline else f"{'':>8}"
    return f"{label:<{width}}{med(values):>9.2f}{min(values):>9.2f}{max(values):>9.2f}{ratio}".rstrip()


def summary_header(first: str = "side", width: int = 30, ratio: bool = True) -> str:
    line = f"{first:<{width}}{'median':>9}{'min':>9}{'max':>9}{'ratio' if ratio else '':>8}"
    return line.rstrip() + "\n" + "-" * len(line)


def hand_kill_teardown(work: Path, args: list[str], *, kill_rank: int = WORLD - 1, timeout: float = 120.0) -> float:
    """The by-hand pair again, training; once every rank printed a step, kill -9 of one rank and the
    seconds until both torchrun commands have exited by themselves (what torchrun alone needs to
    notice and end a broken job: the counterpart of detect + stop)."""
    base = work / f"hand-{uuid.uuid4().hex[:8]}"
    procs = _start_pair(base, args)
    try:
        _wait_step_lines(base, procs, timeout)
        victims = []
        for proc in procs:
            with contextlib.suppress(psutil.Error):
                for child in psutil.Process(proc.pid).children(recursive=True):
                    with contextlib.suppress(psutil.Error):
                        if child.environ().get("RANK") == str(kill_rank):
                            victims.append(child)
        assert victims, f"no by-hand rank {kill_rank}: {_tail(base)}"
        killed = time.time()
        victims[0].send_signal(signal.SIGKILL)
        deadline = time.monotonic() + timeout
        while any(p.poll() is None for p in procs):
            assert time.monotonic() < deadline, f"by-hand torchruns still up {timeout}s after the kill: {_tail(base)}"
            time.sleep(POLL_S)
        return time.time() - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                _kill_tree(proc)

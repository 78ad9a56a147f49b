"""Run directories and the two things the agent does with them: start a supervisor, stop one.

Layout: <work_dir>/runs/job-<id>/attempt-<n>/node-<rank>/ with launch.json (what to run),
supervisor.pid while it runs, result.json when it ended, stop-requested once a stop arrived (a
stop that overtakes its launch must win, or a stopped job would start training afterwards)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypedDict

import psutil

from torchyard import protocol
from torchyard.node.preemption import write_request
from torchyard.node.proctree import sweep_job_processes
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import JobEvent

from .standby import StandbySupervisor

# The agent's publish (agent/main.py): one event to its machine's event stream.
Publish = Callable[[JobEvent], None]

_locks: dict[Path, threading.Lock] = {}
_locks_guard = threading.Lock()


def _lock(path: Path) -> threading.Lock:
    with _locks_guard:
        return _locks.setdefault(path, threading.Lock())


def run_dir(work_dir: Path, job_id: int, attempt: int, node_rank: int) -> Path:
    return work_dir / "runs" / f"job-{job_id}" / f"attempt-{attempt}" / f"node-{node_rank}"


def supervisor_pid(directory: Path) -> int | None:
    """The pid of the supervisor running in `directory`, if it is alive and really ours."""
    try:
        pid = int((directory / "supervisor.pid").read_text().strip())
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE or "torchyard.supervisor" not in " ".join(proc.cmdline()):
            return None
        return pid
    except (OSError, ValueError, psutil.Error):
        return None


class Launched(TypedDict, total=False):
    """The launch task's result: whether a supervisor was started (its pid, whether the standby took
    the launch), or why not."""

    started: bool
    pid: int | None
    standby: bool
    reason: str


class Stopped(TypedDict, total=False):
    """The stop task's result: who stopped the node (its supervisor, or the agent: the processes killed)."""

    stopped: bool
    by: str
    killed: list[int]


class PreemptionRequested(TypedDict):
    requested: bool  # the request was written (a redelivery keeps the first one's)
    running: bool  # the node's supervisor is alive to act on it


class PeersWritten(TypedDict, total=False):
    written: bool
    version: int
    reason: str  # why not


def launch_node(work_dir: Path, launch: NodeLaunch, publish: Publish,
                standby: StandbySupervisor | None = None) -> Launched:
    """Start a detached supervisor for `launch` unless one runs or ran already (Celery may deliver
    a task twice) or a stop came first: the agent's standby when it has one ready (standby.py),
    else a new process."""
    directory = run_dir(work_dir, launch.job_id, launch.attempt, launch.node_rank)
    with _lock(directory):
        if (directory / "stop-requested").exists():
            publish_stopped(launch.job_id, launch.attempt, launch.node_id, launch.node_rank, publish,
                            reason="stop requested before launch")
            return {"started": False, "reason": "stop requested"}
        pid = supervisor_pid(directory)
        if pid is not None or (directory / "result.json").exists():
            return {"started": False, "pid": pid, "reason": "already launched"}
        directory.mkdir(parents=True, exist_ok=True)
        # The agent's user only: the ranks' own log files in it hold what they printed, secrets
        # unmasked, and launch.json holds the machine token (to fetch code bundles) and the
        # job's secret_env (even if an earlier try left the file with another mode).
        directory.chmod(0o700)
        fd = os.open(directory / "launch.json", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(json.dumps(launch.to_dict(), indent=2))
        if standby is not None and (pid := standby.take(directory)) is not None:
            return {"started": True, "pid": pid, "standby": True}
        with open(directory / "supervisor.log", "ab") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "torchyard.supervisor", str(directory)],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True, close_fds=True, cwd=str(directory),
            )
        # Reap it when it ends so it does not linger as a zombie while the agent lives; if the
        # agent goes first, init adopts it and training carries on.
        threading.Thread(target=proc.wait, daemon=True, name=f"reap-{proc.pid}").start()
        return {"started": True, "pid": proc.pid}


def stop_node(work_dir: Path, job_id: int, attempt: int, node_rank: int, node_id: int, publish: Publish,
              grace: float = 20.0) -> Stopped:
    """SIGTERM the node's supervisor (it stops torchrun and reports `stopped`). With no supervisor
    alive, kill whatever still carries the job's environment and report `stopped` ourselves."""
    directory = run_dir(work_dir, job_id, attempt, node_rank)
    with _lock(directory):
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "stop-requested").write_text(str(time.time()))
        pid = supervisor_pid(directory)
    if pid is not None:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and supervisor_pid(directory) is not None:
            time.sleep(0.2)
        if supervisor_pid(directory) is None:
            return {"stopped": True, "by": "supervisor"}
        os.kill(pid, signal.SIGKILL)
    killed = sweep_job_processes(job_id, attempt, node_rank, run_dir=directory)
    if not (directory / "result.json").exists() or pid is not None:
        publish_stopped(job_id, attempt, node_id, node_rank, publish,
                        reason="stopped by the agent" + (f" ({len(killed)} stray processes killed)" if killed else ""))
    return {"stopped": True, "by": "agent", "killed": killed}


def request_preemption(work_dir: Path, job_id: int, attempt: int, node_rank: int, *, grace: float,
                       reason: str) -> PreemptionRequested:
    """Ask the node to checkpoint and yield (node/preemption.py): the request file in its run
    directory, which its ranks and its supervisor watch. A node that has not started yet finds it
    there when it does and yields at its first step."""
    directory = run_dir(work_dir, job_id, attempt, node_rank)
    with _lock(directory):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        written = write_request(directory, grace=grace, reason=reason)
    return {"requested": written, "running": supervisor_pid(directory) is not None}


def write_peers(work_dir: Path, job_id: int, attempt: int, node_rank: int,
                membership: protocol.Membership) -> PeersWritten:
    """Write the job's membership as the node's peers.json (what sdk.peers() reads), atomically, unless
    the file already holds a newer version. The run directory may not exist yet (the update overtook
    the launch): it is made as launch_node makes it."""
    directory = run_dir(work_dir, job_id, attempt, node_rank)
    target = directory / protocol.PEERS_FILE
    version = int(membership.get("version") or 0)
    with _lock(directory):
        directory.mkdir(parents=True, exist_ok=True)
        directory.chmod(0o700)
        with contextlib.suppress(OSError, ValueError, AttributeError):
            if int(json.loads(target.read_text()).get("version") or 0) > version:
                return {"written": False, "reason": "a newer version is there"}
        tmp = directory / f".{protocol.PEERS_FILE}.{os.getpid()}.{threading.get_ident()}.tmp"
        tmp.write_text(json.dumps(membership))
        os.replace(tmp, target)
    return {"written": True, "version": version}


def publish_stopped(job_id: int, attempt: int, node_id: int, node_rank: int, publish: Publish, *, reason: str) -> None:
    publish({
        "type": protocol.STATE, "job": job_id, "attempt": attempt, "node": node_id, "node_rank": node_rank,
        "status": protocol.NODE_STOPPED, "reason": reason, "scope": "node", "ts": time.time(),
        "key": f"agent-stop-{node_id}",
    })


def running_nodes(work_dir: Path) -> list[protocol.RunningNode]:
    """Supervisors alive under work_dir: how a restarted agent re-attaches to its nodes."""
    found: list[protocol.RunningNode] = []
    for pid_file in (work_dir / "runs").glob("job-*/attempt-*/node-*/supervisor.pid"):
        directory = pid_file.parent
        pid = supervisor_pid(directory)
        if pid is not None:
            found.append({"run_dir": str(directory), "pid": pid})
    return found


def stop_all(work_dir: Path, grace: float = 10.0) -> None:
    """SIGTERM every live supervisor under work_dir and wait (embedded mode's Ctrl-C)."""
    pids = [n["pid"] for n in running_nodes(work_dir)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_alive(pid) for pid in pids):
        time.sleep(0.2)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False

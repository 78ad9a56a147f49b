"""What an earlier `torchyard-server run` on the same data directory left behind, found by the
identity its processes carry (torchyard/lifeline.py), and what the next one does with it.

A launcher that ended without its stop sequence (kill -9, an OOM kill, a lost terminal before the
parent-death signal existed) may leave two kinds of process:
- control plane (web, controller, beat, ingest, agents, Redis): they hold the port and consume the
  queues of the next stack, so they are killed; crash-only, they keep nothing that SIGKILL loses.
- node supervisors and their ranks: training, which runs on as it does while an agent restarts.
  The next stack re-attaches to each whose launch still reaches it (the same Redis URL and
  credentials: `reattachable`), and ends the others; their jobs resume from the last checkpoint.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psutil
from torchyard.agent.runs import running_nodes
from torchyard.lifeline import ENV_STACK_DIR, ENV_STACK_ROLE
from torchyard.node.proctree import kill_processes, process_tree, sweep_job_processes

# Children of launchers from before the identity existed, told by their command lines and their
# TORCHYARD_DATA_DIR: what `make run` left in the field when it was killed.
LEGACY_WORDS = (("daphne",), ("celery", "worker"), ("celery", "beat"), ("ingest_events",), ("torchyard.cli", "agent"))
END_GRACE_S = 5.0


@dataclass
class LiveNode:
    """A node supervisor of an earlier generation that is still running, and what its launch says."""

    agent: str  # local-N
    run_dir: Path
    pid: int
    job_id: int
    attempt: int
    node_rank: int
    node_id: int
    machine_token: str
    redis_url: str


def control_plane_left(data_dir: Path) -> list[psutil.Process]:
    """Live control-plane processes of the stack on `data_dir` (never this process)."""
    wanted = str(data_dir.resolve())
    redis_dir = str(data_dir.resolve() / "redis")
    found = []
    for proc in psutil.process_iter():
        if proc.pid == os.getpid():
            continue
        try:
            if proc.status() == psutil.STATUS_ZOMBIE:
                continue
            if proc.name().startswith(("redis-server", "valkey-server")):
                # Redis rewrites its title over its environment: it is told by its working
                # directory (--dir), the data directory's redis/.
                if proc.cwd() == redis_dir:
                    found.append(proc)
                continue
            env = proc.environ()
            if env.get(ENV_STACK_DIR) == wanted:
                if env.get(ENV_STACK_ROLE):
                    found.append(proc)
            elif env.get("TORCHYARD_DATA_DIR") == wanted and "TORCHYARD_JOB_ID" not in env:
                words = set(proc.cmdline())
                if any(set(legacy) <= words for legacy in LEGACY_WORDS):
                    found.append(proc)
        except (psutil.Error, OSError):
            continue
    return found


def end_control_plane(procs: list[psutil.Process]) -> list[int]:
    """SIGKILL them (crash-only: nothing of theirs needs a goodbye); the pids that survived."""
    return kill_processes(procs, sig=signal.SIGKILL)


def live_nodes(data_dir: Path) -> list[LiveNode]:
    """Every node supervisor still running under the stack's local agents."""
    found = []
    for agent_dir in sorted((data_dir / "agents").glob("local-*")):
        for node in running_nodes(agent_dir):
            run_dir = Path(node["run_dir"])
            try:
                launch = json.loads((run_dir / "launch.json").read_text())
                found.append(LiveNode(
                    agent=agent_dir.name, run_dir=run_dir, pid=int(node["pid"]), job_id=int(launch["job_id"]),
                    attempt=int(launch["attempt"]), node_rank=int(launch["node_rank"]), node_id=int(launch["node_id"]),
                    machine_token=str(launch.get("machine_token") or ""), redis_url=str(launch.get("redis_url") or "")))
            except (OSError, ValueError, KeyError, TypeError):
                # Without its launch it cannot be re-attached: ended with the unknown.
                found.append(LiveNode(agent_dir.name, run_dir, int(node["pid"]), 0, 0, 0, 0, "", ""))
    return found


def redis_port(nodes: list[LiveNode]) -> int | None:
    """The port of the Redis the live nodes publish to (an embedded one restarts there)."""
    for node in nodes:
        with contextlib.suppress(ValueError):
            if node.redis_url and (port := urlsplit(node.redis_url).port):
                return port
    return None


def reattachable(node: LiveNode, agent_urls: dict[str, str]) -> bool:
    """The node reaches this stack as it is: its launch's Redis URL (host, port, its machine's user
    and password) is the one its agent has now."""
    return bool(node.redis_url) and agent_urls.get(node.agent) == node.redis_url


def end_nodes(nodes: list[LiveNode]) -> None:
    """Stop supervisors that cannot be re-attached (SIGTERM, SIGKILL after a grace, all at once),
    and whatever of their nodes still runs outside their trees (warm ranks, orphans)."""
    kill_processes([proc for node in nodes for proc in process_tree(node.pid)], grace=END_GRACE_S)
    for node in nodes:
        if node.job_id:
            sweep_job_processes(node.job_id, node.attempt, node.node_rank, run_dir=node.run_dir)


def role_of(proc: psutil.Process) -> str:
    """What the process was in its stack (web, local-0, redis ...), for the console."""
    try:
        if role := proc.environ().get(ENV_STACK_ROLE):
            return role
        words = set(proc.cmdline())
        return next((" ".join(legacy) for legacy in LEGACY_WORDS if set(legacy) <= words), proc.name().split()[0])
    except (psutil.Error, OSError):
        return "?"

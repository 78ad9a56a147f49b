"""Where each rank of a node is right now: every rank's Python stack, read from outside the process
(py-spy, as a hang's evidence is), for a job that looks slow rather than dead (`torchyard stacks JOB`).

A rank is the topmost process of the node that carries a global RANK in its environment (torchrun's
workers, a plain launcher's one process); its own children (DataLoader workers) inherit the variable
and are left out. Nothing of the job is paused: py-spy reads without stopping the process.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from torchyard import protocol
from torchyard.node.proctree import find_job_processes
from torchyard.node.stacks import process_state, python_stack, stack_facts
from torchyard.stream_contract import JobEvent, RankStack


def rank_processes(job_id: int, attempt: int, node_rank: int, runs_dir: Path | None = None) -> dict[int, psutil.Process]:
    """{global rank: its process} for one node of one attempt."""
    found = find_job_processes(job_id, attempt, node_rank, under=runs_dir)
    by_pid = {p.pid: p for p in found}
    ranks: dict[int, psutil.Process] = {}
    for proc in found:
        try:
            rank = proc.environ().get("RANK", "")
            parent = proc.ppid()
            if not rank.isdigit() or "torch.distributed.run" in " ".join(proc.cmdline()):
                continue
            # A child of a process of the same rank (a DataLoader worker) is not the rank.
            if parent in by_pid and by_pid[parent].environ().get("RANK") == rank:
                continue
        except psutil.Error:
            continue
        ranks[int(rank)] = proc
    return ranks


def node_stacks(job_id: int, attempt: int, node_rank: int, runs_dir: Path | None = None) -> list[RankStack]:
    """Every rank's stack on this node, in rank order."""
    stacks: list[RankStack] = []
    for rank, proc in sorted(rank_processes(job_id, attempt, node_rank, runs_dir).items()):
        stack = python_stack(proc.pid)
        waits_in, frame = stack_facts(stack)
        stacks.append({"rank": rank, "pid": proc.pid, "process_state": process_state(proc.pid), "stack": stack,
                       "waits_in": waits_in, "frame": frame})
    return stacks


def publish_stacks(job_id: int, attempt: int, node_rank: int, node_id: int, request: str,
                   publish: Callable[[JobEvent], None], runs_dir: Path | None = None) -> int:
    """Read and publish one STACKS event for the node; returns how many ranks it holds."""
    ranks = node_stacks(job_id, attempt, node_rank, runs_dir)
    publish({"type": protocol.STACKS, "job": job_id, "attempt": attempt, "node": node_id, "node_rank": node_rank,
             "request": request, "ranks": ranks, "hostname": socket.gethostname(), "ts": time.time(),
             "key": f"stacks-{request}-{node_id}"})
    return len(ranks)

"""Helpers for supervisor tests: tiny training scripts, supervisors started the way the agent does.

Every process a test starts is ended by PID, and every job's processes are swept by their
TORCHYARD_JOB_ID, so a failing test leaves nothing running.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import redis
from torchyard import protocol
from torchyard.node.proctree import find_job_processes, sweep_job_processes
from torchyard.protocol import NodeLaunch
from torchyard.supervisor.argv import LAUNCH_FILE, PACKAGE_PARENT

# Distinct per test session and per test, so no stream entry or process of another job matches.
_job_ids = itertools.count(os.getpid() * 1000)


def next_job_id() -> int:
    return next(_job_ids)


ALLREDUCE = """
import json, os, socket, sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"hello from rank {rank} of {dist.get_world_size()}")
print(f"rank {rank} stderr line", file=sys.stderr)
total = torch.tensor([float(rank)])
dist.all_reduce(total)
print(f"rank {rank} sum {total.item():g}")
with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sdk:
    report = {"type": "metric", "rank": rank, "step": 1, "loss": 0.5 + rank}
    sdk.sendto(json.dumps(report).encode(), os.environ["TORCHYARD_EVENT_SOCKET"])
dist.barrier()
dist.destroy_process_group()
"""

# The global rank named by FAIL_RANK exits 3 once the group is up; its peers, waiting in a barrier,
# then see the connection drop and fail too.
FAIL_ONE_RANK = """
import os, sys
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
print(f"rank {rank} started")
if rank == int(os.environ["FAIL_RANK"]):
    print(f"rank {rank} giving up", file=sys.stderr)
    sys.exit(3)
dist.barrier()
dist.destroy_process_group()
"""

# Trains "forever"; no torch import, so it starts fast and costs no CPU.
SLEEPER = """
import itertools, time
for step in itertools.count():
    print(f"step {step}", flush=True)
    time.sleep(0.2)
"""

# Local rank 0 fails; local rank 1 ignores SIGTERM, so torchrun waits on it (30 s in torch 2.13).
STUBBORN = """
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
if os.environ["LOCAL_RANK"] == "0":
    time.sleep(1.0)
    print("rank 0 failing", file=sys.stderr, flush=True)
    sys.exit(7)
print("rank 1 ignoring SIGTERM", flush=True)
while True:
    time.sleep(0.2)
"""

# Reports a step every 0.1 s through the SDK; local rank 1 stops itself (SIGSTOP) after step 5, a
# hang that no exit code or heartbeat shows.
STALLS = """
import os, signal, time
from torchyard import sdk

def train_step(step):
    time.sleep(0.1)

for step in range(1, 1000):
    train_step(step)
    sdk.report(step=step, loss=1.0 / step)
    if step == 5 and os.environ["LOCAL_RANK"] == "1":
        print("rank 1 about to hang", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
"""

# Both ranks report steps, then each waits to receive from the other: a hang in which every rank
# waits on a peer and none holds the others.
WAITS_ON_PEERS = """
import time
import torch
import torch.distributed as dist
from torchyard import sdk

dist.init_process_group("gloo")
rank = dist.get_rank()
for step in range(1, 6):
    time.sleep(0.1)
    sdk.report(step=step, loss=1.0 / step)
dist.recv(torch.zeros(1), src=1 - rank)
"""

# Rank 0 reports three steps and ends; rank 1 reports none and ends 5 s later, so torchrun runs on
# while rank 0's last step grows old.
FINISHES_FIRST = """
import os, time
from torchyard import sdk

if os.environ["LOCAL_RANK"] == "0":
    for step in range(1, 4):
        sdk.report(step=step, loss=1.0 / step)
else:
    time.sleep(5)
"""

SCRIPTS = {
    "finishes_first.py": FINISHES_FIRST,
    "stalls.py": STALLS,
    "waits_on_peers.py": WAITS_ON_PEERS,
    "allreduce.py": ALLREDUCE,
    "fail_one_rank.py": FAIL_ONE_RANK,
    "sleeper.py": SLEEPER,
    "stubborn.py": STUBBORN,
}


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def listening_on(port: int) -> Iterator[socket.socket]:
    """Hold a TCP port the way a foreign program would."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        yield s


class Supervisors:
    """Starts `python -m torchyard.supervisor RUN_DIR` processes as the agent does, and ends them."""

    def __init__(self, tmp_path: Path, code_root: Path, redis_url: str) -> None:
        self.tmp_path = tmp_path
        self.code_root = code_root
        self.redis = redis.Redis.from_url(redis_url, decode_responses=True)
        self.started: list[tuple[subprocess.Popen, NodeLaunch]] = []

    def start(
        self, launch: NodeLaunch, env: dict[str, str] | None = None, run_dir_name: str = ""
    ) -> tuple[subprocess.Popen, Path]:
        run_dir = self.tmp_path / (run_dir_name or f"run-{launch.job_id}-{launch.attempt}-{launch.node_rank}")
        run_dir.mkdir()
        (run_dir / LAUNCH_FILE).write_text(json.dumps(launch.to_dict()))
        child_env = {
            **os.environ,
            "TORCHYARD_CODE_ROOT": str(self.code_root),
            "PYTHONPATH": str(PACKAGE_PARENT),
            **(env or {}),
        }
        with open(run_dir / "supervisor.log", "wb") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "torchyard.supervisor", str(run_dir)],
                env=child_env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.started.append((proc, launch))
        return proc, run_dir

    def events(self, job_id: int) -> list[dict]:
        """Every event of the job on the event stream, in stream order, then its heartbeats (they
        travel on the liveness stream)."""
        found = []
        for stream in (protocol.EVENT_STREAM, protocol.LIVENESS_STREAM):
            for _id, fields in self.redis.xrange(stream):
                found.extend(e for e in protocol.decode_entry(fields) if e.get("job") == job_id)
        return found

    def wait_for(
        self, job_id: int, predicate: Callable[[list[dict]], bool], timeout: float = 30.0
    ) -> list[dict]:
        """Poll the stream until predicate(events of the job) holds; fail with the latest events."""
        deadline = time.monotonic() + timeout
        while True:
            events = self.events(job_id)
            if predicate(events):
                return events
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out; last events: {[summarize(e) for e in events][-30:]}")
            time.sleep(0.1)

    def close(self) -> None:
        for proc, launch in self.started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            sweep_job_processes(launch.job_id)
        self.redis.close()


def stream_events(redis_url: str, job_id: int) -> list[dict]:
    """The job's events on the shared event stream (a launch without a machine token publishes
    there), in stream order: what the controller's ingest would read."""
    client = redis.Redis.from_url(redis_url)
    try:
        events = [e for _id, fields in client.xrange(protocol.EVENT_STREAM) for e in protocol.decode_entry(fields)]
    finally:
        client.close()
    return [e for e in events if e["job"] == job_id]


def summarize(event: dict) -> str:
    detail = event.get("status") or event.get("line") or ""
    return f"{event['type']}/node{event.get('node_rank')}/rank{event.get('rank')}: {detail}"


def states(events: list[dict], node_rank: int) -> list[dict]:
    return [e for e in events if e["type"] == protocol.STATE and e["node_rank"] == node_rank]


def final_states(events: list[dict], node_rank: int) -> list[dict]:
    return [e for e in states(events, node_rank) if e["status"] != protocol.NODE_RUNNING]


def has_final_state(*node_ranks: int) -> Callable[[list[dict]], bool]:
    return lambda events: all(final_states(events, rank) for rank in node_ranks)


def has_state(node_rank: int, status: str) -> Callable[[list[dict]], bool]:
    return lambda events: any(e["status"] == status for e in states(events, node_rank))


def job_processes(job_id: int) -> list:
    """Live processes of the job on this host (zombies and unreadable ones excluded)."""
    return find_job_processes(job_id)


def wait_until_no_job_processes(job_id: int, timeout: float = 5.0) -> list:
    deadline = time.monotonic() + timeout
    while (left := job_processes(job_id)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left

"""A node's ranks from a warm pool (`python -m torchyard.warm.run PLAN.json`), in torchrun's place.

The node supervisor starts this instead of `torchrun` when the node's Python has a warm pool; it
behaves as `torchrun --max-restarts 0 --redirects 3 --log-dir D` does for the supervisor and for the
ranks: every rank gets torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, ROLE_*,
MASTER_*, TORCHELASTIC_*, OMP_NUM_THREADS=1 on a multi-process node), its stdout and stderr in
D/<run id>_warm/attempt_0/<local rank>/, and the first rank that fails is named as torchrun names it
("failed (exitcode: 1) local_rank: 0 (pid: 42)") before the others are sent SIGTERM; the exit code is
0 when every rank exits 0, else 1. A SIGTERM to it goes to every rank's process group.

The one difference: no elastic agent holds a store, so rank 0 hosts the rendezvous store on
MASTER_PORT itself (TORCHELASTIC_USE_AGENT_STORE=False), as `init_process_group("env://")` does
without torchrun. Standard library only: it starts in milliseconds, torch is in the pool.
"""

from __future__ import annotations

import json
import os
import resource
import selectors
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Any, TypedDict

# How long the ranks have after SIGTERM (the first failure, or a stop) before SIGKILL: torchrun's.
TERM_GRACE_S = 30.0
PLAN_KEYS = ("socket", "nproc", "rank_start", "world_size", "nnodes", "node_rank", "master_addr", "master_port",
             "run_id", "log_dir", "argv", "module")


class WarmPlan(TypedDict):
    """What the warm launcher reads (supervisor/warm_launch.py build_plan): the pool, the node's
    share of the world, where the per-rank files go, and the script or module with its args."""

    socket: str  # the warm pool's
    nproc: int
    rank_start: int
    world_size: int
    nnodes: int
    node_rank: int
    master_addr: str
    master_port: int
    run_id: str
    log_dir: str
    argv: list[str]
    module: str
    binary: str  # the training Python


def rank_env(base: dict[str, str], plan: WarmPlan, local_rank: int, error_file: Path) -> dict[str, str]:
    """One rank's environment, as torchrun's elastic agent gives it (torch 2.13, static rendezvous)."""
    env = dict(base)
    nproc = int(plan["nproc"])
    if nproc > 1:
        env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "1")
    env.update({
        "LOCAL_RANK": str(local_rank),
        "RANK": str(int(plan["rank_start"]) + local_rank),
        "GROUP_RANK": str(plan["node_rank"]),
        "ROLE_RANK": str(int(plan["rank_start"]) + local_rank),
        "ROLE_NAME": "default",
        "LOCAL_WORLD_SIZE": str(nproc),
        "WORLD_SIZE": str(plan["world_size"]),
        "GROUP_WORLD_SIZE": str(plan["nnodes"]),
        "ROLE_WORLD_SIZE": str(plan["world_size"]),
        "MASTER_ADDR": str(plan["master_addr"]),
        "MASTER_PORT": str(plan["master_port"]),
        "TORCHELASTIC_RESTART_COUNT": "0",
        "TORCHELASTIC_MAX_RESTARTS": "0",
        "TORCHELASTIC_RUN_ID": str(plan["run_id"]),
        "TORCHELASTIC_USE_AGENT_STORE": "False",
        "TORCHELASTIC_ERROR_FILE": str(error_file),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": "SIGTERM,SIGINT,SIGHUP,SIGQUIT",
    })
    return env


def own_limits() -> dict[str, list[int]]:
    """This process's resource limits: a cold torchrun's ranks would inherit exactly these."""
    limits = {}
    for name in dir(resource):
        if name.startswith("RLIMIT_"):
            try:
                limits[name] = list(resource.getrlimit(getattr(resource, name)))
            except (ValueError, OSError):
                continue
    return limits


class Rank:
    def __init__(self, local_rank: int, conn: socket.socket) -> None:
        self.local_rank = local_rank
        self.conn = conn
        self.pid: int | None = None
        self.exit: int | None = None
        self.buffer = b""


def spawn(plan: WarmPlan) -> list[Rank]:
    """Ask the pool for every rank; returns them once each has a pid."""
    umask = os.umask(0)
    os.umask(umask)
    limits = own_limits()
    ranks = []
    log_dir = Path(plan["log_dir"])
    base = dict(os.environ)
    for local_rank in range(int(plan["nproc"])):
        folder = log_dir / "attempt_0" / str(local_rank)
        folder.mkdir(parents=True, exist_ok=True)
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(plan["socket"])
        request = {"op": "spawn", "argv": plan["argv"], "module": plan.get("module") or "",
                   "env": rank_env(base, plan, local_rank, folder / "error.json"), "cwd": os.getcwd(),
                   "stdout": str(folder / "stdout.log"), "stderr": str(folder / "stderr.log"),
                   "umask": umask, "rlimits": limits}
        conn.sendall(json.dumps(request).encode() + b"\n")
        ranks.append(Rank(local_rank, conn))
    for rank in ranks:
        while rank.pid is None:
            message = _receive(rank)
            if message is None or "error" in message:
                raise RuntimeError(f"the warm pool refused local rank {rank.local_rank}: "
                                   f"{(message or {}).get('error', 'connection closed')}")
            rank.pid = message.get("pid")
    return ranks


def _receive(rank: Rank) -> dict[str, Any] | None:
    while b"\n" not in rank.buffer:
        data = rank.conn.recv(65536)
        if not data:
            return None
        rank.buffer += data
    line, _, rank.buffer = rank.buffer.partition(b"\n")
    return json.loads(line)


def say(message: str) -> None:
    print(f"[torchyard warm] {message}", file=sys.stderr, flush=True)


def terminate(ranks: list[Rank], signum: int) -> None:
    for rank in ranks:
        if rank.exit is None and rank.pid:
            try:
                os.killpg(rank.pid, signum)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            if signum == signal.SIGTERM:
                print(f"Sending process {rank.pid} closing signal SIGTERM", file=sys.stderr, flush=True)


def supervise(ranks: list[Rank], binary: str) -> int:
    """Wait for the ranks as torchrun does; the exit code torchrun would return."""
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stop.append(signum))
    selector = selectors.DefaultSelector()
    for rank in ranks:
        selector.register(rank.conn, selectors.EVENT_READ, rank)
    failed: Rank | None = None
    kill_at: float | None = None
    while any(rank.exit is None for rank in ranks):
        if stop and kill_at is None:
            terminate(ranks, signal.SIGTERM)
            kill_at = time.monotonic() + TERM_GRACE_S
        if kill_at is not None and time.monotonic() > kill_at:
            terminate(ranks, signal.SIGKILL)
            kill_at = float("inf")
        for key, _ in selector.select(timeout=0.1):
            rank = key.data
            message = _receive(rank)
            if message is None:
                # The pool died: its children go with it (each was its child, killed or orphaned).
                rank.exit = rank.exit if rank.exit is not None else -signal.SIGKILL
            elif "exit" in message:
                rank.exit = int(message["exit"])
            else:
                continue
            selector.unregister(rank.conn)
            rank.conn.close()
            if rank.exit != 0 and failed is None and not stop:
                failed = rank
                print(f"failed (exitcode: {rank.exit}) local_rank: {rank.local_rank} (pid: {rank.pid}) of binary: "
                      f"{binary}", file=sys.stderr, flush=True)
                terminate(ranks, signal.SIGTERM)
                kill_at = time.monotonic() + TERM_GRACE_S
    if stop:
        return 128 + stop[0]
    return 0 if failed is None else 1


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(args[0]).read_text())
    missing = [key for key in PLAN_KEYS if key not in plan]
    if missing:
        say(f"the plan lacks {', '.join(missing)}")
        return 2
    started = time.monotonic()
    try:
        ranks = spawn(plan)
    except (OSError, RuntimeError, ValueError) as exc:
        say(f"cannot start the ranks from the warm pool {plan['socket']}: {exc}")
        return 1
    pids = {rank.local_rank: rank.pid for rank in ranks}
    (Path(plan["log_dir"]) / "pids.json").write_text(json.dumps(pids))
    say(f"{len(ranks)} rank(s) forked from the warm pool in {1000 * (time.monotonic() - started):.0f} ms: "
        + ", ".join(f"local rank {k} pid {v}" for k, v in pids.items()))
    return supervise(ranks, plan.get("binary", ""))


if __name__ == "__main__":
    sys.exit(main())

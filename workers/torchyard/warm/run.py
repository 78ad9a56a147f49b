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

Under `fault_tolerance.mode: in_place` (the plan's `in_place`) a rank that dies is not the end of the
node: the launcher forks its replacement from the pool, with the same identity, while the others
keep running (they wait for it in torchft's quorum, sdk/resilient.py), up to `replacements` times;
then, or when a replacement cannot be forked, it falls back to torchrun's behaviour above. Node 0's
launcher also forks the job's lighthouse (torchyard.warm.lighthouse) on MASTER_PORT first.
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
from typing import Any, NotRequired, TypedDict

# How long the ranks have after SIGTERM (the first failure, or a stop) before SIGKILL: torchrun's.
TERM_GRACE_S = 30.0
# sdk/resilient.py's: the lighthouse a rank's torchft Manager asks, and a replacement's number.
ENV_LIGHTHOUSE = "TORCHYARD_FT_LIGHTHOUSE"
ENV_REPLACEMENT = "TORCHYARD_FT_REPLACEMENT"
# A rank that yielded for a preemption (protocol.YIELD_EXIT_CODE) left on purpose: it is not replaced.
YIELD_EXIT_CODE = 83
LIGHTHOUSE_MODULE = "torchyard.warm.lighthouse"
LIGHTHOUSE = -1  # its Rank's local_rank: not a rank
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
    # fault_tolerance.mode in_place: replace a dead rank this many times (supervisor/warm_launch.py).
    in_place: NotRequired[bool]
    replacements: NotRequired[int]


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
    if plan.get("in_place"):
        env[ENV_LIGHTHOUSE] = f"http://{plan['master_addr']}:{plan['master_port']}"
        env.setdefault("RUST_LOG", "warn")  # torchft's Rust side logs every quorum at info
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


class Forker:
    """Asks the warm pool for processes with this launcher's umask, limits and environment."""

    def __init__(self, plan: WarmPlan) -> None:
        self.plan = plan
        self.umask = os.umask(0)
        os.umask(self.umask)
        self.limits = own_limits()
        self.base = dict(os.environ)

    def request(self, local_rank: int, extra_env: dict[str, str] | None = None) -> Rank:
        """Sends the pool the rank's (or the lighthouse's) request; its pid comes with wait_pid."""
        plan = self.plan
        lighthouse = local_rank == LIGHTHOUSE
        folder = Path(plan["log_dir"]) / "attempt_0" / ("lighthouse" if lighthouse else str(local_rank))
        folder.mkdir(parents=True, exist_ok=True)
        if lighthouse:
            env = {**rank_env(self.base, plan, 0, folder / "error.json"), "RUST_LOG": "warn"}
            for key in ("RANK", "LOCAL_RANK", "ROLE_RANK"):
                env.pop(key)  # not a rank: a job's ranks are found by their RANK
            argv, module = [LIGHTHOUSE_MODULE, f"{plan['master_addr']}:{plan['master_port']}",
                            str(plan["world_size"])], LIGHTHOUSE_MODULE
        else:
            env = rank_env(self.base, plan, local_rank, folder / "error.json")
            argv, module = plan["argv"], plan.get("module") or ""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(plan["socket"])
        request = {"op": "spawn", "argv": argv, "module": module, "env": {**env, **(extra_env or {})},
                   "cwd": os.getcwd(), "stdout": str(folder / "stdout.log"), "stderr": str(folder / "stderr.log"),
                   "umask": self.umask, "rlimits": self.limits}
        conn.sendall(json.dumps(request).encode() + b"\n")
        return Rank(local_rank, conn)


def wait_pid(rank: Rank) -> None:
    while rank.pid is None:
        message = _receive(rank)
        if message is None or "error" in message:
            what = "the lighthouse" if rank.local_rank == LIGHTHOUSE else f"local rank {rank.local_rank}"
            raise RuntimeError(f"the warm pool refused {what}: {(message or {}).get('error', 'connection closed')}")
        rank.pid = message.get("pid")


def spawn(plan: WarmPlan, forker: Forker | None = None) -> list[Rank]:
    """Ask the pool for every rank; returns them once each has a pid."""
    forker = forker or Forker(plan)
    ranks = [forker.request(local_rank) for local_rank in range(int(plan["nproc"]))]
    for rank in ranks:
        wait_pid(rank)
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


def terminate(ranks: list[Rank], signum: int, *, named: bool = True) -> None:
    """Signal each live rank's process group; `named`: torchrun's line for each SIGTERM (the supervisor
    reads it as a node closing its workers after a failure: never said of the lighthouse's end)."""
    for rank in ranks:
        if rank.exit is None and rank.pid:
            try:
                os.killpg(rank.pid, signum)
            except ProcessLookupError:
                continue
            except PermissionError:
                pass
            if signum == signal.SIGTERM and named:
                print(f"Sending process {rank.pid} closing signal SIGTERM", file=sys.stderr, flush=True)


class Replacer:
    """In-place replacements of a node's dead ranks (fault_tolerance.mode in_place), at most `left`."""

    def __init__(self, plan: WarmPlan, forker: Forker) -> None:
        self.plan, self.forker = plan, forker
        self.left = int(plan.get("replacements") or 0) if plan.get("in_place") else 0
        self.done = 0

    def replace(self, dead: Rank) -> Rank | None:
        """The dead rank's replacement, forked and with a pid; None when none is left or the pool
        refused (the caller falls back to stopping the node), having said why."""
        rank = int(self.plan["rank_start"]) + dead.local_rank
        if not self.plan.get("in_place") or dead.exit == YIELD_EXIT_CODE:
            return None
        if self.left <= 0:
            say(f"rank {rank} exited with {dead.exit}; its in-place replacements are spent "
                f"({self.done} of fault_tolerance.max_restarts): restarting the attempt")
            return None
        try:
            new = self.forker.request(dead.local_rank, {ENV_REPLACEMENT: str(self.done + 1)})
            wait_pid(new)
        except (OSError, RuntimeError, ValueError) as exc:
            say(f"rank {rank} exited with {dead.exit} and cannot be replaced in place ({exc}): restarting the attempt")
            return None
        self.left -= 1
        self.done += 1
        say(f"rank {rank} (local rank {dead.local_rank}, pid {dead.pid}) exited with {dead.exit}; replaced in place "
            f"by pid {new.pid}, the others kept running (replacement {self.done})")
        return new


def write_pids(plan: WarmPlan, ranks: list[Rank]) -> dict[int, int | None]:
    """The node's live ranks' pids by local rank, where the supervisor finds them (ranks.py); rewritten
    (atomically) when one is replaced."""
    pids = {rank.local_rank: rank.pid for rank in ranks}
    path = Path(plan["log_dir"]) / "pids.json"
    path.with_suffix(".tmp").write_text(json.dumps(pids))
    path.with_suffix(".tmp").replace(path)
    return pids


def supervise(ranks: list[Rank], binary: str, *, plan: WarmPlan | None = None, replacer: Replacer | None = None,
              lighthouse: Rank | None = None) -> int:
    """Wait for the ranks as torchrun does (replacing a dead one in place when the plan says so); the
    exit code torchrun would return."""
    stop: list[int] = []
    signal.signal(signal.SIGTERM, lambda signum, _frame: stop.append(signum))
    signal.signal(signal.SIGINT, lambda signum, _frame: stop.append(signum))
    selector = selectors.DefaultSelector()
    for rank in ranks + ([lighthouse] if lighthouse else []):
        selector.register(rank.conn, selectors.EVENT_READ, rank)
    live = {rank.local_rank: rank for rank in ranks}
    failed: Rank | None = None
    kill_at: float | None = None
    while any(rank.exit is None for rank in live.values()):
        if stop and kill_at is None:
            terminate(list(live.values()), signal.SIGTERM)
            kill_at = time.monotonic() + TERM_GRACE_S
        if kill_at is not None and time.monotonic() > kill_at:
            terminate(list(live.values()), signal.SIGKILL)
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
            if rank is lighthouse:
                if failed is None and not stop and any(r.exit is None for r in live.values()):
                    say(f"the in_place lighthouse ended (exit {rank.exit}): restarting the attempt")
                    failed = rank
                    terminate(list(live.values()), signal.SIGTERM)
                    kill_at = time.monotonic() + TERM_GRACE_S
                continue
            if rank.exit != 0 and failed is None and not stop:
                new = replacer.replace(rank) if replacer is not None else None
                if new is not None and plan is not None:
                    live[rank.local_rank] = new
                    selector.register(new.conn, selectors.EVENT_READ, new)
                    write_pids(plan, list(live.values()))
                    continue
                failed = rank
                print(f"failed (exitcode: {rank.exit}) local_rank: {rank.local_rank} (pid: {rank.pid}) of binary: "
                      f"{binary}", file=sys.stderr, flush=True)
                terminate(list(live.values()), signal.SIGTERM)
                kill_at = time.monotonic() + TERM_GRACE_S
    if lighthouse is not None and lighthouse.exit is None:
        terminate([lighthouse], signal.SIGTERM, named=False)
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
    forker = Forker(plan)
    lighthouse = None
    try:
        if plan.get("in_place") and int(plan["node_rank"]) == 0:
            lighthouse = forker.request(LIGHTHOUSE)
            wait_pid(lighthouse)
        ranks = spawn(plan, forker)
    except (OSError, RuntimeError, ValueError) as exc:
        say(f"cannot start the ranks from the warm pool {plan['socket']}: {exc}")
        if lighthouse is not None:
            terminate([lighthouse], signal.SIGTERM, named=False)
        return 1
    pids = write_pids(plan, ranks)
    say(f"{len(ranks)} rank(s) forked from the warm pool in {1000 * (time.monotonic() - started):.0f} ms: "
        + ", ".join(f"local rank {k} pid {v}" for k, v in pids.items())
        + (f"; the in_place lighthouse pid {lighthouse.pid}" if lighthouse is not None else ""))
    return supervise(ranks, plan.get("binary", ""), plan=plan, replacer=Replacer(plan, forker), lighthouse=lighthouse)


if __name__ == "__main__":
    sys.exit(main())

"""Find, measure and kill the processes of a job: shared by the supervisor and the agent.

Every process Torchyard launches carries TORCHYARD_JOB_ID, TORCHYARD_ATTEMPT and TORCHYARD_NODE_RANK
in its environment. That is what finds strays: torchrun starts each worker in its own session, and a
worker whose torchrun was killed with SIGKILL runs on as an orphan that no process group or parent
link reaches any more.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

from torchyard import protocol
from torchyard.stream_contract import ResourceEvent


def find_job_processes(
    job_id: int | str,
    attempt: int | str | None = None,
    node_rank: int | str | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    under: str | os.PathLike | None = None,
    exclude_pids: Iterable[int] = (),
) -> list[psutil.Process]:
    """Live processes whose environment names this job (and attempt and node rank, when given).

    `run_dir` narrows to one node's run directory and `under` to run directories below a folder
    (one agent's or one stack's): job ids are only unique within one control plane.
    Processes whose environment cannot be read (another user's, zombies, gone) are skipped, and the
    calling process is never returned.
    """
    wanted = {protocol.ENV_JOB_ID: str(job_id)}
    if attempt is not None:
        wanted[protocol.ENV_ATTEMPT] = str(attempt)
    if node_rank is not None:
        wanted[protocol.ENV_NODE_RANK] = str(node_rank)
    if run_dir is not None:
        wanted[protocol.ENV_RUN_DIR] = str(Path(run_dir).resolve())
    prefix = str(Path(under).resolve()) + os.sep if under is not None else None
    skip = {os.getpid(), *exclude_pids}
    found = []
    for proc in psutil.process_iter():
        if proc.pid in skip:
            continue
        try:
            environ = proc.environ()
        except (psutil.Error, OSError):
            continue
        if all(environ.get(key) == value for key, value in wanted.items()) and (
            prefix is None or environ.get(protocol.ENV_RUN_DIR, "").startswith(prefix)
        ):
            found.append(proc)
    return found


def is_alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (a zombie is dead; only its parent's wait() is missing)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_exit(procs: Iterable[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to timeout for the processes to end; returns those still alive.

    Unlike psutil.wait_procs this treats zombies as gone: orphans reparented to an init that does
    not reap them would otherwise look alive forever.
    """
    alive = [p for p in procs if is_alive(p)]
    deadline = time.monotonic() + timeout
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if is_alive(p)]
    return alive


def kill_processes(
    procs: Iterable[psutil.Process], *, sig: int = signal.SIGTERM, grace: float = 5.0
) -> list[int]:
    """Send sig to each process, SIGKILL whatever is alive after grace seconds.

    Returns the pids that survived even SIGKILL (e.g. stuck in uninterruptible kernel sleep).
    """
    procs = [p for p in procs if p.pid != os.getpid()]
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            proc.send_signal(sig)
    if sig != signal.SIGKILL:
        for proc in wait_for_exit(procs, grace):
            with contextlib.suppress(psutil.Error):
                proc.kill()
    return [p.pid for p in wait_for_exit(procs, 2.0)]


def _child_pids(pid: int) -> list[int] | None:
    """The pids of `pid`'s children, from each of its threads' /proc/PID/task/TID/children (Linux
    3.5 on, CONFIG_PROC_CHILDREN); [] when it is gone, None when the kernel keeps no such file."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except FileNotFoundError:
        return []
    except OSError:
        return None
    found: list[int] = []
    for tid in tasks:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found += [int(child) for child in handle.read().split()]
        except FileNotFoundError:
            if os.path.isdir(f"/proc/{pid}/task/{tid}"):
                return None  # the thread is there and its children file is not: the kernel has none
        except OSError:
            continue  # the thread ended meanwhile
    return found


def children(proc: psutil.Process, *, recursive: bool = False) -> list[psutil.Process]:
    """psutil's `proc.children(recursive)`, read from the process's own /proc entries downwards.
    psutil finds children by reading the parent of every process on the machine, which a
    supervisor that looks at its ranks several times a second paid for on every look (most of its
    CPU on a busy machine). Raises psutil.NoSuchProcess when `proc` is gone, as psutil does."""
    if not proc.is_running():
        raise psutil.NoSuchProcess(proc.pid)
    found: list[psutil.Process] = []
    pending, seen = [proc.pid], {proc.pid}
    while pending:
        pids = _child_pids(pending.pop(0))
        if pids is None:
            return proc.children(recursive=recursive)
        for pid in pids:
            if pid in seen:
                continue
            seen.add(pid)
            with contextlib.suppress(psutil.Error):
                found.append(psutil.Process(pid))
                if recursive:
                    pending.append(pid)
    return found


def process_tree(pid: int) -> list[psutil.Process]:
    """The process and all its descendants (empty when it is gone)."""
    try:
        root = psutil.Process(pid)
        return [root, *children(root, recursive=True)]
    except psutil.Error:
        return []


def kill_process_tree(pid: int, *, sig: int = signal.SIGTERM, grace: float = 5.0) -> list[int]:
    """Signal pid and every descendant, SIGKILL survivors after grace; returns pids still alive.

    The tree is read before anything is signalled: once a parent dies its children are reparented
    and can no longer be found from it.
    """
    return kill_processes(process_tree(pid), sig=sig, grace=grace)


def sweep_job_processes(
    job_id: int | str,
    attempt: int | str | None = None,
    node_rank: int | str | None = None,
    *,
    run_dir: str | os.PathLike | None = None,
    rounds: int = 3,
) -> list[int]:
    """SIGKILL every process of the job (attempt, node rank); returns the pids that were killed.

    A few rounds, since a process may fork between the scan and the kill.
    """
    killed: list[int] = []
    for _ in range(rounds):
        procs = find_job_processes(job_id, attempt, node_rank, run_dir=run_dir)
        if not procs:
            break
        kill_processes(procs, sig=signal.SIGKILL)
        killed.extend(p.pid for p in procs)
    return killed


def tree_usage(proc: psutil.Process) -> tuple[float, int] | None:
    """(CPU seconds, user and system; bytes read and written through any descriptor, /proc/PID/io's
    rchar and wchar) of the process and everything under it, in one walk; None when it is gone.
    A hung process tree moves neither."""
    try:
        tree = [proc, *children(proc, recursive=True)]
    except psutil.Error:
        return None
    cpu, io = 0.0, 0
    for each in tree:
        with contextlib.suppress(psutil.Error, AttributeError), each.oneshot():
            times = each.cpu_times()
            cpu += times.user + times.system
            counters = each.io_counters()
            io += counters.read_chars + counters.write_chars  # type: ignore[attr-defined]
    return cpu, io


class TreeSampler:
    """CPU percent and RSS summed over a process tree, sampled repeatedly.

    psutil computes cpu_percent between two calls on the same Process object, so the objects are
    kept from one sample to the next; a process seen for the first time counts 0 CPU.
    """

    def __init__(self) -> None:
        self._known: dict[int, psutil.Process] = {}

    def sample(self, *root_pids: int) -> ResourceEvent:
        """The `resource` event of the trees under root_pids: cpu_percent (100 = one full core),
        rss_mb, processes."""
        tree: list[psutil.Process] = []
        for root in root_pids:
            tree += [proc for proc in process_tree(root) if proc not in tree]
        current: dict[int, psutil.Process] = {}
        cpu = 0.0
        rss = 0
        for proc in tree:
            known = self._known.get(proc.pid)
            proc = known if known is not None and known == proc else proc
            try:
                with proc.oneshot():
                    cpu += proc.cpu_percent(interval=None)
                    rss += proc.memory_info().rss
            except psutil.Error:
                continue
            current[proc.pid] = proc
        self._known = current
        return {"type": "resource", "cpu_percent": round(cpu, 1), "rss_mb": round(rss / 2**20, 1),
                "processes": len(current)}

"""The node's processes, as torch elastic's PContext is its agent's: start the command in a session
of its own, find every process of it (a warm start's ranks are the pool's children, not the
launcher's), signal and kill them all. No policy here: the supervisor decides when."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from torchyard.node.proctree import children, is_alive, kill_processes, process_tree, sweep_job_processes

from .commands import Command

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None


def _terminate_with_parent() -> None:
    # Runs in the child between fork and exec: if the supervisor dies (even by SIGKILL), torchrun gets
    # SIGTERM and ends its workers, instead of training on unobserved.
    if _libc is not None:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


class RankProcesses:
    """One started command (torchrun, the warm launcher, Ray's runner, one process) and its ranks."""

    def __init__(self, command: Command, cwd: Path) -> None:
        self.command = command
        # Truncated: the tails read them from the start.
        stderr_path = command.stderr
        with open(command.stdout, "wb") as output, open(stderr_path or os.devnull, "ab") as errors:
            self.proc = subprocess.Popen(
                command.argv,
                env=command.env,
                cwd=cwd,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT if stderr_path is None else errors,
                # Its own session: signals to the supervisor's group never reach it, and the whole
                # group can be signalled at once on stop.
                start_new_session=True,
                preexec_fn=_terminate_with_parent,  # safe: the supervisor starts no threads
            )
        self.started_at = time.time()
        # A warm start's ranks by local rank (None: ended before its pid was read), once known.
        self._warm_ranks: dict[int, psutil.Process | None] = {}
        self._pids_read = 0  # the pids file's mtime when last read

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def _warm(self) -> dict[int, psutil.Process | None]:
        """A warm start's ranks by local rank, once its launcher has written their pids (the pool
        forked them: they are not under the launcher). Process objects: psutil tells a pid reused by
        another process from the rank."""
        pids_file = self.command.warm_pids_file
        if pids_file is None:
            return self._warm_ranks
        # Read again when the launcher rewrote it: a rank replaced in place (fault_tolerance.mode in_place).
        with contextlib.suppress(OSError):
            changed = pids_file.stat().st_mtime_ns
            if changed != self._pids_read:
                self._warm_ranks, self._pids_read = {}, changed
        if not self._warm_ranks:
            with contextlib.suppress(OSError, ValueError):
                for local_rank, pid in json.loads(pids_file.read_text()).items():
                    try:
                        self._warm_ranks[int(local_rank)] = psutil.Process(int(pid))
                    except psutil.NoSuchProcess:
                        self._warm_ranks[int(local_rank)] = None
        return self._warm_ranks

    def rank_pids(self) -> list[int]:
        """A warm start's live rank pids."""
        return [proc.pid for proc in self._warm().values() if proc is not None and proc.is_running()]

    def rank_processes(self, rank_start: int, *, one_process: bool) -> tuple[dict[int | None, psutil.Process], set[int]]:
        """The node's rank processes found now, by global rank (None: `one_process`, the command is
        the node's one process), and the ranks known to have ended already: a warm rank may start and
        end between two looks, its pid is in the launcher's file."""
        if one_process:
            with contextlib.suppress(psutil.Error):
                return {None: psutil.Process(self.proc.pid)}, set()
            return {}, set()
        found: dict[int | None, psutil.Process] = {}
        ended: set[int] = set()
        if self.command.warm_pids_file is not None:
            for local_rank, proc in self._warm().items():
                if proc is None:
                    ended.add(rank_start + local_rank)
                else:
                    found[rank_start + local_rank] = proc
            return found, ended
        try:
            workers = children(psutil.Process(self.proc.pid))  # torchrun's own: not a rank's children
        except psutil.Error:
            return found, ended
        for proc in workers:
            with contextlib.suppress(psutil.Error, OSError, ValueError):
                rank = proc.environ().get("RANK")
                if rank is not None:
                    found[int(rank)] = proc
        return found, ended

    def tree(self) -> list[psutil.Process]:
        """The launcher and every process under it, then a warm start's ranks and theirs."""
        tree = process_tree(self.proc.pid)
        for rank in self._warm().values():
            with contextlib.suppress(psutil.Error):
                if rank is not None and rank.is_running():
                    tree += [proc for proc in [rank, *children(rank, recursive=True)] if proc not in tree]
        return tree

    def workers_alive(self) -> bool:
        """Any process of the node other than the launcher itself."""
        return any(is_alive(p) for p in self.tree()[1:])

    def rank_pid(self, rank: int, *, launcher_may_be_rank: bool) -> int | None:
        """The pid of the process whose RANK is `rank` (under a launcher other than torchrun the
        process itself may be the rank)."""
        tree = self.tree()
        for proc in tree[1:] + (tree[:1] if launcher_may_be_rank else []):
            try:
                if proc.environ().get("RANK") == str(rank):
                    return proc.pid
            except (psutil.Error, OSError):
                continue
        return None

    def signal_group(self, signum: int) -> None:
        # The launcher leads its own session, so its pgid is its pid; signalling by pid avoids a
        # lookup that fails once it is a zombie.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signum)

    def continue_all(self) -> None:
        """A stopped process (SIGSTOP, a debugger let go) only acts on SIGTERM once continued."""
        for proc in self.tree():
            with contextlib.suppress(psutil.Error):
                proc.send_signal(signal.SIGCONT)

    def kill_now(self) -> None:
        """SIGKILL the group and every descendant (workers live in sessions of their own)."""
        if self.command.ray:
            # Ray's daemons (GCS, raylet, its workers) outlive the runner in its group, and SIGTERM
            # leaves some of them: the group is killed whether its leader is gone or not.
            tree = self.tree()
            self.signal_group(signal.SIGKILL)
            kill_processes(tree, sig=signal.SIGKILL)
        if self.proc.poll() is not None:
            return
        tree = self.tree()  # read before the kill: orphans cannot be found from the launcher
        self.signal_group(signal.SIGKILL)
        kill_processes(tree, sig=signal.SIGKILL)
        self.wait(5)

    def wait(self, timeout: float) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)

    @staticmethod
    def sweep(job_id: int, attempt: int, node_rank: int, run_dir: Path) -> list[int]:
        """Whatever of this node still runs, found by the job's identity in its environment."""
        return sweep_job_processes(job_id, attempt, node_rank, run_dir=run_dir)

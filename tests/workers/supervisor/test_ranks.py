"""The node's processes (supervisor/ranks.py RankProcesses) on their own, with plain child
processes standing for torchrun and its ranks: where their output goes, how they end, what reaches
them when the supervisor signals, stops or kills them."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from torchyard.supervisor.commands import Command
from torchyard.supervisor.ranks import RankProcesses

# A launcher that starts one worker per RANK in argv (in its own group, or its own session with
# "session"), each saying when it listens for SIGTERM and exiting with its RANK on one; the launcher
# outlives them, says how they ended and exits with their codes summed.
LAUNCHER = """
import os, signal, subprocess, sys
signal.signal(signal.SIGTERM, lambda *_: None)
WORKER = '''
import os, signal, sys, time
def end(signum, frame):
    sys.exit(int(os.environ['RANK']))
signal.signal(signal.SIGTERM, signal.SIG_IGN if os.environ.get('STUBBORN') else end)
print(f"rank {os.environ['RANK']} ready", flush=True)
while True:
    time.sleep(0.05)
'''
session = sys.argv[1] == "session"
workers = [subprocess.Popen([sys.executable, "-c", WORKER], env={**os.environ, "RANK": rank},
                            start_new_session=session) for rank in sys.argv[2:]]
codes = [w.wait() for w in workers]
print("workers ended with", codes, flush=True)
sys.exit(sum(codes))
"""


def command(tmp_path: Path, code: str, *args: str, stderr: bool = True, env: dict[str, str] | None = None,
            warm_pids_file: Path | None = None) -> Command:
    return Command(argv=[sys.executable, "-c", code, *args], env={**os.environ, **(env or {})},
                   stdout=tmp_path / "stdout.log", stderr=tmp_path / "stderr.log" if stderr else None,
                   what="python", warm_pids_file=warm_pids_file)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[RankProcesses]]:
    """RankProcesses a test starts; whatever of them still runs is killed afterwards."""
    ranks: list[RankProcesses] = []
    yield ranks
    for node in ranks:
        node.kill_now()


def start(started: list[RankProcesses], command: Command, cwd: Path) -> RankProcesses:
    node = RankProcesses(command, cwd)
    started.append(node)
    return node


def running(proc: psutil.Process) -> bool:
    """Alive and not a zombie: an orphan's zombie waits for an init that may be slow to reap it."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_for_lines(path: Path, *wanted: str, timeout: float = 10.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        lines = path.read_text().splitlines() if path.exists() else []
        if all(w in lines for w in wanted):
            return lines
        assert time.monotonic() < deadline, f"{path} never said {wanted}: {lines}"
        time.sleep(0.02)


def test_the_command_runs_in_a_session_of_its_own_with_fresh_output_files_and_its_exit_code(tmp_path, started):
    (tmp_path / "stdout.log").write_text("an earlier attempt's line\n")
    code = ("import os, sys\n"
            "print('stdin:', repr(sys.stdin.read()), 'own session:', os.getsid(0) == os.getpid(), 'cwd:', os.getcwd())\n"
            "print('to stderr', file=sys.stderr)\n"
            "sys.exit(3)\n")
    node = start(started, command(tmp_path, code), tmp_path)
    node.wait(10)
    assert node.poll() == 3
    assert (tmp_path / "stdout.log").read_text() == f"stdin: '' own session: True cwd: {tmp_path}\n"
    assert (tmp_path / "stderr.log").read_text() == "to stderr\n"


def test_without_a_stderr_file_the_command_writes_both_streams_to_its_one_log(tmp_path, started):
    code = "import sys; print('out', flush=True); print('err', file=sys.stderr)"
    node = start(started, command(tmp_path, code, stderr=False), tmp_path)
    node.wait(10)
    assert node.poll() == 0 and (tmp_path / "stdout.log").read_text() == "out\nerr\n"
    assert node.command.torchrun_like


def test_the_ranks_are_found_by_their_rank_and_a_signal_to_the_group_reaches_every_one(tmp_path, started):
    node = start(started, command(tmp_path, LAUNCHER, "group", "4", "5"), tmp_path)
    output = tmp_path / "stdout.log"
    wait_for_lines(output, "rank 4 ready", "rank 5 ready")

    ranks, ended = node.rank_processes(4, one_process=False)
    assert sorted(ranks) == [4, 5] and ended == set()
    assert all(proc.ppid() == node.pid for proc in ranks.values())
    assert node.rank_pid(5, launcher_may_be_rank=False) == ranks[5].pid
    assert node.rank_pid(6, launcher_may_be_rank=True) is None
    assert node.rank_processes(4, one_process=True)[0] == {None: psutil.Process(node.pid)}
    assert node.workers_alive()

    node.signal_group(signal.SIGTERM)
    node.wait(10)
    assert node.poll() == 9  # the launcher's own code, 4 + 5
    assert output.read_text().splitlines()[-1] == "workers ended with [4, 5]"  # each by its SIGTERM handler
    assert not node.workers_alive()


def test_kill_now_ends_workers_that_ignore_sigterm_in_sessions_of_their_own(tmp_path, started):
    node = start(started, command(tmp_path, LAUNCHER, "session", "0", "1", env={"STUBBORN": "1"}), tmp_path)
    wait_for_lines(tmp_path / "stdout.log", "rank 0 ready", "rank 1 ready")
    workers = node.tree()[1:]
    assert len(workers) == 2 and all(os.getsid(p.pid) == p.pid for p in workers)  # out of the group's reach

    node.kill_now()
    assert node.poll() == -signal.SIGKILL
    assert not any(running(p) for p in workers)
    assert not node.workers_alive()


def test_a_stopped_process_acts_on_sigterm_only_once_continued(tmp_path, started):
    code = ("import signal, sys, time\n"
            "signal.signal(signal.SIGTERM, lambda *_: sys.exit(5))\n"
            "print('ready', flush=True)\n"
            "while True: time.sleep(0.02)\n")
    node = start(started, command(tmp_path, code), tmp_path)
    wait_for_lines(tmp_path / "stdout.log", "ready")
    node.signal_group(signal.SIGSTOP)
    node.signal_group(signal.SIGTERM)
    node.wait(0.3)
    assert node.poll() is None  # stopped: the SIGTERM waits
    node.continue_all()
    node.wait(10)
    assert node.poll() == 5


def test_a_warm_starts_ranks_come_from_the_launchers_pid_file_and_are_killed_with_it(tmp_path, started):
    # A warm pool forks the ranks: they are not the launcher's children, only its file names them.
    rank = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    try:
        pids_file = tmp_path / "pids.json"
        pids_file.write_text(json.dumps({"0": rank.pid, "1": gone.pid}))
        node = start(started, command(tmp_path, "import time; time.sleep(60)", warm_pids_file=pids_file), tmp_path)

        found, ended = node.rank_processes(8, one_process=False)
        assert {r: p.pid for r, p in found.items()} == {8: rank.pid} and ended == {9}
        assert node.rank_pids() == [rank.pid]
        assert rank.pid in [p.pid for p in node.tree()] and node.workers_alive()

        node.kill_now()
        assert rank.wait(timeout=5) == -signal.SIGKILL
        assert node.poll() == -signal.SIGKILL
    finally:
        rank.kill()
        rank.wait()

"""The two ways a child of `torchyard-server run` ends with it (torchyard/lifeline.py), each on its
own: the parent-death signal set by the exec wrapper, and the watch a Python child runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
from torchyard import lifeline

ROOT = Path(__file__).resolve().parents[2]
PARENT_DEATH = [sys.executable, "-I", "-S", str(ROOT / "backend" / "torchyard_server" / "runtime" / "parent_death.py")]
WATCHER = "from torchyard.lifeline import watch_launcher; assert watch_launcher(); import time; time.sleep(60)"


def orphan_after_parent_dies(child_argv: list[str], env: dict[str, str]) -> psutil.Process:
    """A middle process (the launcher's stand-in) starts the child, then is killed with SIGKILL;
    returns the child."""
    script = (f"import subprocess, time\nchild = subprocess.Popen({child_argv!r}, env={env!r})\n"
              "print(child.pid, flush=True)\ntime.sleep(60)\n")
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    child = psutil.Process(int(middle.stdout.readline()))
    time.sleep(1.0)  # the child is running (and its watch started) before its parent dies
    assert child.is_running()
    middle.send_signal(signal.SIGKILL)
    middle.wait()
    return child


def gone_within(proc: psutil.Process, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.05)
    proc.kill()
    return False


def test_the_exec_wrapper_makes_the_kernel_end_the_child_with_its_parent():
    # The command names its parent's pid: the wrapper runs in the middle process's child, whose
    # parent is the middle process, so "$PPID" is read there by a shell.
    child = orphan_after_parent_dies(["/bin/sh", "-c", f'exec {" ".join(PARENT_DEATH)} "$PPID" sleep 60'], {})
    assert gone_within(child, 2.0)


def test_a_python_child_watching_its_launcher_ends_once_it_is_gone():
    env = {**os.environ, "PYTHONPATH": str(ROOT / "workers")}
    # No parent-death signal here: only the watch can end it. Its launcher's pid is the middle process's,
    # which the shell gives as $PPID.
    child = orphan_after_parent_dies(
        ["/bin/sh", "-c", f'{lifeline.ENV_LAUNCHER_PID}=$PPID exec {sys.executable} -c "{WATCHER}"'], env)
    assert gone_within(child, 1.0 + lifeline.WATCH_EVERY_S * 2)


def test_the_watch_does_nothing_where_the_parent_is_not_the_launcher(monkeypatch):
    monkeypatch.setenv(lifeline.ENV_LAUNCHER_PID, str(os.getppid() + 1))
    assert lifeline.watch_launcher() is False
    assert lifeline.ENV_LAUNCHER_PID not in os.environ  # nor does what this process starts inherit it

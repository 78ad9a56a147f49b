"""A supervisor started ahead of its launch, both halves of the hand-over: its command line (`argv`,
which the agent starts, keeping one per machine: agent/standby.py) and its taking on the run
directory the agent then writes to it (`wait_for_launch`, in supervisor/__main__.py).

Starting `python -m torchyard.supervisor` costs 0.5-2 s of interpreter start and imports (Redis's
client alone is most of it), on every node of every launch and recovery. A standby pays that while
the machine is idle, then waits on a pipe from the agent: the agent writes a run directory and its
environment, and the standby becomes that node's supervisor, exactly as one started for it then
(environment, working directory, log file, command line). The agent's end of the pipe closing before that (the agent gone) ends the standby.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from torchyard.warm import proctitle

STANDBY_ARG = "--standby-fd"


def argv(fd: int) -> list[str]:
    """The standby's command line: room at its end for the run directory it will show once it has one."""
    return [sys.executable, "-m", "torchyard.supervisor", STANDBY_ARG, str(fd), proctitle.room_arg()[:4096]]


def wait_for_launch(fd: int) -> Path | None:
    """Block until the agent names a run directory (None: the agent closed the pipe first), then take
    it on: its working directory, its supervisor.log as stdout and stderr, its path in /proc/PID/cmdline
    (what `ps` and the sweeps that look for a job's supervisors read)."""
    with os.fdopen(fd, "r") as pipe:
        line = pipe.readline().strip()
    if not line:
        return None
    handed = json.loads(line)
    # The agent's environment as it is now, which a supervisor started now would inherit (the
    # agent's own changes since this one started: Celery's variables, for one).
    os.environ.clear()
    os.environ.update(handed["env"])
    run_dir = Path(handed["run_dir"])
    os.chdir(run_dir)
    log = os.open(run_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    proctitle.rewrite([sys.executable, "-m", "torchyard.supervisor", str(run_dir)], dict(os.environ))
    return run_dir

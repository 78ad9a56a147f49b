"""What ties the embedded stack's processes to the launcher that started them (`torchyard-server run`).

The launcher gives each child it starts (web, controller, beat, ingest, the local agents, its
Redis) an identity in the environment: the stack's data directory, the child's role and the
launcher's generation. A later launcher on the same data directory finds by it what an earlier one
left behind (torchyard_server/runtime/generations.py). The node supervisors and ranks the agents start
inherit the data directory but not the role: they are the training, which outlives the control plane.

A child must not outlive its launcher, whatever ends the launcher. Two mechanisms, because each
misses what the other catches:
- PR_SET_PDEATHSIG (torchyard_server/runtime/parent_death.py, set before exec): the kernel SIGKILLs the
  child the moment the launcher dies, even a child that runs no code of ours (redis-server) or one
  too wedged to run any; but it is Linux-only and dropped by a setuid exec.
- `watch_launcher` here, in every Python child: a thread that ends its process once its parent is
  no longer the launcher (reparented: the launcher died). Portable, and independent of how the
  child was started.
"""

from __future__ import annotations

import os
import signal
import threading
import time

ENV_STACK_DIR = "TORCHYARD_STACK_DIR"  # the launcher's data directory, resolved
ENV_STACK_ROLE = "TORCHYARD_STACK_ROLE"  # web, controller, beat, ingest, local-N, redis
ENV_STACK_GENERATION = "TORCHYARD_STACK_GENERATION"  # one per launcher run
ENV_LAUNCHER_PID = "TORCHYARD_LAUNCHER_PID"  # the parent whose death ends this process
WATCH_EVERY_S = 0.5


def watch_launcher() -> bool:
    """In a direct child of the launcher: end this process (SIGKILL, as the parent-death signal
    would) once the launcher is gone. Anywhere else (no launcher, or a process further down, which
    inherited the variable) nothing. True when a watch started."""
    expected = os.environ.pop(ENV_LAUNCHER_PID, "")
    if not expected.isdigit() or os.getppid() != int(expected):
        return False
    launcher = int(expected)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(WATCH_EVERY_S)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=watch, daemon=True, name="launcher-watch").start()
    return True


def forget_control_plane_identity() -> None:
    """In a local agent: what it starts (node supervisors, ranks) is training, not control plane,
    so it carries the stack's data directory but neither the role nor the launcher's pid."""
    for name in (ENV_STACK_ROLE, ENV_STACK_GENERATION, ENV_LAUNCHER_PID):
        os.environ.pop(name, None)

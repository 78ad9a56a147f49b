"""`python -I -S parent_death.py PARENT_PID COMMAND...`: run COMMAND so that it dies with PARENT_PID.

The launcher starts every child through this (torchyard/lifeline.py says why together with the
watch in each Python child): it asks the kernel for SIGKILL when the parent dies
(PR_SET_PDEATHSIG, Linux), then execs COMMAND, which keeps that setting. Run as a script with the
standard library only (-I -S: no site-packages to scan), it costs one bare interpreter start.

Why not subprocess's preexec_fn: the launcher has threads (its output pumps), and Python code run
between fork and exec in a threaded parent can deadlock on a lock another thread held at the fork.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PR_SET_PDEATHSIG = 1


def main(argv: list[str]) -> int:
    if len(argv) < 2 or not argv[0].isdigit():
        print("usage: parent_death.py PARENT_PID COMMAND [ARG...]", file=sys.stderr)
        return 2
    parent, command = int(argv[0]), argv[1:]
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's among them
        if libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
            print(f"parent_death: prctl failed: {os.strerror(ctypes.get_errno())}", file=sys.stderr)
    # The parent may have died before the setting took: nothing would ever send the signal then.
    if os.getppid() != parent:
        return 1
    os.execvp(command[0], command)
    return 127  # not reached: execvp raises when it cannot run the command


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

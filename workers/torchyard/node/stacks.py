"""Where a process's threads are, read from outside it: its Python stack (py-spy, no cooperation from
the script, a stopped process read too), its state, and what the main thread waits in. The
supervisor reads a stalled rank's as a hang's evidence (supervisor/stall.py); the agent reads every
rank's on request (agent/stacks.py, `torchyard stacks JOB`).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import psutil

MAX_STACK_CHARS = 16_000


def _py_spy() -> str | None:
    """py-spy from the agent's environment (beside its Python), else from PATH."""
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def python_stack(pid: int, timeout: float = 10.0, *, native: bool = False) -> str:
    """Every thread's Python stack of a live process, read from outside.

    `--nonblocking` reads the memory without pausing the process (and works on a stopped one,
    which py-spy's default ptrace suspend does not). `native`: the C and C++ frames too, which needs
    the process paused for the moment of the read (a hung teardown is in torch's C++)."""
    tool = _py_spy()
    if tool is None:
        return "(no stack: py-spy is not installed beside the agent)"
    how = "--native" if native else "--nonblocking"
    try:
        done = subprocess.run([tool, "dump", "--pid", str(pid), how], capture_output=True,
                              text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"(no stack: py-spy failed: {exc})"
    text = done.stdout if done.returncode == 0 else f"(no stack: py-spy: {done.stderr.strip()[:500]})"
    return text[-MAX_STACK_CHARS:]


def process_state(pid: int) -> str:
    """psutil's status of the process ("running", "sleeping", "stopped", "disk-sleep" ...)."""
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


# A frame of py-spy's dump ("    all_reduce (torch/distributed/distributed_c10d.py:2501)") and a
# thread's heading ('Thread 1234 (idle): "MainThread"').
_FRAME = re.compile(r"^\s+(?P<func>\S.*?) \((?P<where>[^()]*:\d+)\)\s*$")
_THREAD = re.compile(r'^Thread \S+ \([^)]*\)(?:: "(?P<name>[^"]*)")?')
# autograd's backward is where DDP's gradient all-reduce waits (its reducer hooks run inside it).
_BACKWARD = {"backward", "_engine_run_backward", "grad"}


def _waits_on_peers(func: str, where: str) -> bool:
    """A frame of torch.distributed (collectives, point-to-point, barriers, FSDP), DDP's module, or
    autograd's backward: a rank stalled there for the whole timeout waits for another rank."""
    return ("torch/distributed/" in where or "torch/nn/parallel/distributed.py" in where
            or ("torch/autograd/" in where and func.rsplit(".", 1)[-1] in _BACKWARD))


def stack_facts(stack: str) -> tuple[str | None, str | None]:
    """(waits_in, frame) of the main thread in a py-spy dump: the innermost frame that waits on
    peers ("" when none does: outside any collective), and the innermost frame. (None, None) when
    the text holds no stack (py-spy missing or failed)."""
    threads: list[tuple[str, list[tuple[str, str]]]] = []
    for line in stack.splitlines():
        if heading := _THREAD.match(line):
            threads.append((heading.group("name") or "", []))
        elif threads and (frame := _FRAME.match(line)):
            threads[-1][1].append((frame.group("func"), frame.group("where")))
    if not threads:
        return None, None
    frames = next((f for name, f in threads if name == "MainThread"), threads[0][1])
    if not frames:
        return None, None
    waiting = next((f"{func} ({where})" for func, where in frames if _waits_on_peers(func, where)), "")
    return waiting, f"{frames[0][0]} ({frames[0][1]})"

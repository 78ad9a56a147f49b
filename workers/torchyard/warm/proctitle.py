"""What `ps`, psutil and /proc say a forked rank is: its own command line and environment.

A forked process keeps its parent's exec-time argv and environment blocks, which is what
/proc/PID/cmdline and /proc/PID/environ read: every rank would show the fork server's command and
the agent's environment, and nothing could find a job's processes by the identity in their
environment (the sweeps, stop and the kill tests all do). The fork server therefore starts with
room in both blocks (`ROOM_ARG`, `ROOM_ENV`) and the child writes its own into them in place, as
setproctitle(3) does for the command line. The libc environment the rank reads (getenv, os.environ)
is set the ordinary way first; the old block is referenced by nothing once it has been cleared.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping

# The fork server's last argument and one variable of its environment are this much room
# (an argument or variable may not exceed 128 KiB: MAX_ARG_STRLEN).
ARG_ROOM_BYTES = 8 * 1024
ENV_ROOM_BYTES = 120 * 1024
ENV_ROOM_NAMES = ("TORCHYARD_WARM_ROOM_1", "TORCHYARD_WARM_ROOM_2")


def room_arg() -> str:
    return "#" * ARG_ROOM_BYTES


def room_env() -> dict[str, str]:
    return {name: "#" * ENV_ROOM_BYTES for name in ENV_ROOM_NAMES}


def _blocks() -> tuple[int, int, int, int]:
    """(arg_start, arg_end, env_start, env_end) of this process, from /proc/self/stat (Linux >= 3.5)."""
    with open("/proc/self/stat", "rb") as f:
        fields = f.read().rpartition(b")")[2].split()
    # Field n of proc(5) is fields[n - 3] once the command name is cut off.
    return int(fields[45]), int(fields[46]), int(fields[47]), int(fields[48])


def _write(start: int, end: int, items: list[bytes]) -> int:
    """Write NUL-terminated items from start, as many as fit, NUL-fill the rest; how many fit."""
    size = end - start
    data = bytearray()
    written = 0
    for item in items:
        if len(data) + len(item) + 1 > size:
            break
        data += item + b"\0"
        written += 1
    data += b"\0" * (size - len(data))
    ctypes.memmove(start, bytes(data), size)
    return written


def rewrite(argv: list[str], env: Mapping[str, str], first: tuple[str, ...] = ()) -> tuple[int, int]:
    """Show `argv` and `env` (variables whose name starts with one of `first` first: those must fit)
    as this process's; returns how many arguments and variables fit."""
    arg_start, arg_end, env_start, env_end = _blocks()
    args = _write(arg_start, arg_end, [a.encode(errors="surrogateescape") for a in argv])
    ordered = sorted(env.items(), key=lambda kv: not kv[0].startswith(first)) if first else list(env.items())
    variables = _write(env_start, env_end, [f"{k}={v}".encode(errors="surrogateescape") for k, v in ordered])
    return args, variables

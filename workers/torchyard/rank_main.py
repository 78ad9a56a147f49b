"""A rank's main: run the user's script (or module) as `__main__`, then end the process without
torch's teardown. Every torchrun rank runs through it, warm (the fork server calls `run_rank` in the
forked child) or cold (`torchrun ... -m torchyard.rank_main SCRIPT ARGS`, or `-m torchyard.rank_main
-m MODULE ARGS`), so both end the same way. Standard library only: it runs in the training Python.

Why: torch's teardown of a process group can deadlock, and a rank that ends by `os._exit` after its
script never needs it. Evidence (torch 2.13, gloo, a plain DDP script ending in
`dist.destroy_process_group()` as its `main()` returns): the stuck rank's main thread is in
`std::thread::join` <- `c10d::ProcessGroupGloo::~ProcessGroupGloo` <- `c10d::Reducer::~Reducer` <-
`pybind11_object_dealloc` <- the script's last line, and a gloo worker thread of the same process in
`pybind11::gil_scoped_acquire` <- `ConcretePyInterpreterVTable::decref` <- `~ThreadLocalState` <-
`~AsyncAllreduceWork` <- `ProcessGroupGloo::runLoop`. Every `backward()` stashes a Python object in
the thread-local state each gloo collective copies (torch.autograd.graph._engine_run_backward), so the
worker that drops a finished collective must take the GIL; DDP's Reducer is bound without releasing
the GIL on destruction (pytorch#56297), and once `destroy_process_group()` has run it holds the last
reference to the group: dropping the DDP model joins the worker with the GIL held. When the worker has
not had the GIL since the last collective (the script's last few milliseconds fit in one GIL switch
interval), neither moves again. A warm rank ends its script fast enough to do so in about half of
all runs of such a script (8 of 12 measured); a cold rank that survives it dies instead in the
interpreter's finalization ("terminate called without an active exception", SIGABRT: 4 of 12).

So a rank keeps its own reference to every process group it makes (`keep_process_groups`): whoever
drops another one later never runs the destructor, no worker thread is joined, and `exit_now` ends the
process (atexit callbacks run, non-daemon threads joined, streams flushed) without finalizing torch.
`destroy_process_group()` still does what it says to torch: the group is shut down and forgotten.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import runpy
import sys
import sysconfig
import traceback
from typing import Any

from torchyard import protocol

_kept: list[Any] = []


def keep_process_groups() -> bool:
    """Hold every process group torch.distributed registers from now on until the process ends.
    False when torch.distributed is not loaded yet (a cold rank: it is imported here, as every rank
    of torchrun's imports it) or no longer has the hook."""
    try:
        # By name, as the fork server preloads torch: this runs in the training Python only, and the
        # agent's processes that import this package never call it.
        c10d = importlib.import_module("torch.distributed.distributed_c10d")
    except ImportError:
        return False
    register = getattr(c10d, "_register_process_group", None)
    if register is None or getattr(register, "_torchyard_keeps", False):
        return register is not None

    def register_and_keep(group_name: str, pg: Any) -> Any:
        _kept.append(pg)
        return register(group_name, pg)

    register_and_keep._torchyard_keeps = True  # type: ignore[attr-defined]
    setattr(c10d, "_register_process_group", register_and_keep)  # noqa: B010 - a module global, by name
    return True


def run_main(module: str, argv: list[str]) -> int:
    """Run the script `argv[0]` (or `module`) as `__main__` with `argv` as sys.argv; its exit code as
    the interpreter would give it: SystemExit's code, or 1 with the traceback (without these frames)
    for an exception."""
    sys.argv = list(argv)
    try:
        if module:
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as exc:
        code = exc.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code
        print(code, file=sys.stderr)
        return 1
    except BaseException as exc:  # noqa: BLE001 - the interpreter's own top level, as a cold start
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename in (__file__, runpy.__file__, "<frozen runpy>"):
            tb = tb.tb_next
        traceback.print_exception(type(exc), exc, tb)
        note_error(exc, tb)
        return 1
    return 0


def _is_users(filename: str, libraries: tuple[str, ...]) -> bool:
    """A frame of the user's own code: not the standard library, not an installed package, not Torchyard."""
    path = os.path.abspath(filename)
    return not filename.startswith("<") and not path.startswith(libraries)


def _library_dirs() -> tuple[str, ...]:
    """Where code that is not the user's lives. Asked only once a rank raised: never on a rank's start."""
    paths = sysconfig.get_paths()
    found = [paths.get(key) for key in ("stdlib", "platstdlib", "purelib", "platlib")] + [sys.base_prefix, sys.prefix]
    return (os.path.dirname(os.path.abspath(__file__)) + os.sep,
            *{os.path.abspath(path) + os.sep for path in found if path})


def note_error(exc: BaseException, tb: Any) -> None:
    """Leave RUN_DIR/error-<RANK>.json for the node's supervisor: the exception's type and message, the
    innermost frame of the user's code that raised it (relative to the working directory, which moves
    between attempts), and the step the rank last reported (torchyard.sdk.report, when the script
    uses the SDK: read from the module if it was loaded, never imported here)."""
    # A Ray job's driver has no RANK of its own: it is the job's rank 0.
    run_dir, rank = os.environ.get(protocol.ENV_RUN_DIR), os.environ.get("RANK", "0")
    if not run_dir or isinstance(exc, KeyboardInterrupt):
        return
    frame, libraries = "", _library_dirs()
    for summary in traceback.extract_tb(tb):
        if _is_users(summary.filename, libraries):
            where = os.path.relpath(os.path.abspath(summary.filename))
            frame = f"{where if not where.startswith('..') else os.path.basename(where)}:{summary.lineno} in {summary.name}"
    events = sys.modules.get("torchyard.sdk.events")
    step = getattr(events, "_last_step", None)
    error = {"type": f"{type(exc).__module__}.{type(exc).__qualname__}".removeprefix("builtins."),
             "message": str(exc).strip()[:500], "frame": frame, "rank": int(rank),
             "step": step if isinstance(step, int) else None}
    with contextlib.suppress(OSError), open(os.path.join(run_dir, f"{protocol.ERROR_PREFIX}{rank}.json"), "w") as out:
        json.dump(error, out)


def exit_now(code: int) -> None:
    """End the rank as the interpreter would, less the teardown of every module (about a second with
    torch loaded, and where torch's deadlocks are): as multiprocessing ends its children, non-daemon
    threads joined, atexit callbacks run, the standard streams flushed, then _exit. A script that
    returned 0 says so first (`_note_returned`)."""
    import atexit
    import threading

    if code == 0:
        _note_returned()
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code & 0xFF if code >= 0 else 1)


def _note_returned() -> None:
    """Tell the node's supervisor that the script returned 0: what the process does from here on
    (non-daemon threads joined, atexit callbacks) is teardown, ended for it when it hangs idle
    (supervisor/linger.py). RUN_DIR/returned-<RANK>."""
    run_dir, rank = os.environ.get(protocol.ENV_RUN_DIR), os.environ.get("RANK")
    if run_dir and rank:
        with contextlib.suppress(OSError), open(os.path.join(run_dir, f"{protocol.RETURNED_PREFIX}{rank}"), "w"):
            pass


def main(args: list[str]) -> None:
    """`python -u -m torchyard.rank_main SCRIPT ARGS...` or `... -m MODULE ARGS...`: a cold rank,
    with the sys.path a plain `python -u SCRIPT` (or `-m MODULE`) would have started with."""
    if not args or (args[0] == "-m" and len(args) < 2):
        print("usage: python -m torchyard.rank_main (SCRIPT | -m MODULE) [ARGS...]", file=sys.stderr)
        os._exit(2)
    module = args[1] if args[0] == "-m" else ""
    argv = [module, *args[2:]] if module else list(args)
    if not module:
        # `python -m` put the working directory first; `python SCRIPT` puts the script's folder.
        sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
    keep_process_groups()
    exit_now(run_main(module, argv))


if __name__ == "__main__":
    main(sys.argv[1:])

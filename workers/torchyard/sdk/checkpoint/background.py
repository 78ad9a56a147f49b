"""Async saves: the one save in flight per process, its thread, and waiting for it.

A save started with ``async_=True`` writes, hashes and commits on a thread of its own, through the
same protocol as a synchronous save. Its collectives (rank 0's verdict, the exchange of results
that is the barrier before the commit, the outcome) run on a gloo group of their own, created on
the caller's thread at the first async save: two threads must never issue collectives on one
group, since every rank has to see them in the same order.

At most one save is in flight: the next save (or a load) waits for it and says so. The process
waits for it at exit too (an atexit hook registered at the first async save, so that it runs
before the hook that releases the process group, which was registered earlier).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

# How much lower than the training loop's a save thread's scheduling priority is.
NICE = 10


class PendingSave:
    """An async save in flight, as ``sdk.checkpoint.save(..., async_=True)`` returns it.

    ``result()`` waits for it and returns True once the checkpoint is committed (False when it
    failed: nothing was committed, the previous checkpoint stays the latest). ``blocking_seconds``
    is how long save() held the caller; ``background_seconds`` how long the rest took, once done.
    """

    def __init__(self, step: int, blocking_seconds: float) -> None:
        self.step = step
        self.blocking_seconds = blocking_seconds
        self.background_seconds: float | None = None
        self._future: Future[bool] = Future()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> bool:
        return self._future.result(timeout)

    def __repr__(self) -> str:
        state = f"committed={self._future.result()}" if self.done() else "in flight"
        return f"<PendingSave step={self.step} {state}>"


_lock = threading.Lock()
_pending: PendingSave | None = None
_exit_hook_registered = False
_group: tuple[Any, Any] | None = None  # (the default group it was made from, the checkpoint group)


def _say(message: str) -> None:
    with contextlib.suppress(OSError, ValueError):  # a closed or broken stderr must not stop a save
        print(f"[torchyard] {message}", file=sys.stderr, flush=True)


def in_flight() -> PendingSave | None:
    """The async save not finished yet, if any."""
    with _lock:
        return _pending if _pending is not None and not _pending.done() else None


def latest() -> PendingSave | None:
    """This process's latest async save, finished or not (None before the first)."""
    with _lock:
        return _pending


def wait(why: str = "") -> PendingSave | None:
    """Wait for the save in flight, if any, and return it (None when there was none). With
    ``why`` (what is waiting), say so when it actually had to wait."""
    pending = in_flight()
    if pending is None:
        return None
    started = time.perf_counter()
    pending._future.exception()  # waits; a failed save has already warned
    if why:
        seconds = time.perf_counter() - started
        _say(f"{why} waited {seconds:.2f}s for the checkpoint at step {pending.step} to finish")
    return pending


def start(step: int, blocking_seconds: float, work: Callable[[float], bool]) -> PendingSave:
    """Run ``work(started)`` (the save's protocol; ``started`` is when the background part began,
    on time.perf_counter's clock) on its own thread; the caller has waited for the previous save."""
    global _pending, _exit_hook_registered
    pending = PendingSave(step, blocking_seconds)

    def run() -> None:
        # The training loop first: on a machine whose cores its ranks keep busy, the save takes what
        # they leave (Linux sets a nice value per thread).
        with contextlib.suppress(OSError, AttributeError):
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), NICE)
        started = time.perf_counter()
        ok = False
        try:
            ok = bool(work(started))
        except BaseException as exc:  # noqa: BLE001 - a save never ends training; it fails
            _say(f"warning: checkpoint at step {step} not saved: {exc!r}")
        finally:
            # Whatever happened (even a closed stderr), whoever waits for this save is released.
            pending.background_seconds = time.perf_counter() - started
            pending._future.set_result(ok)

    with _lock:
        if _pending is not None and not _pending.done():
            raise RuntimeError("an async checkpoint is already in flight")  # save() waits first
        _pending = pending
        if not _exit_hook_registered:
            atexit.register(_wait_at_exit)
            _exit_hook_registered = True
    # A daemon thread, joined by the atexit hook: a non-daemon one would be joined before any
    # atexit hook runs, silently, and a process killed by a signal never waits either way.
    threading.Thread(target=run, name=f"torchyard-checkpoint-{step}", daemon=True).start()
    return pending


def _wait_at_exit() -> None:
    pending = in_flight()
    if pending is not None:
        _say(f"waiting for the checkpoint at step {pending.step} to commit before exiting")
        wait()


def checkpoint_group() -> Any:
    """The gloo group of async saves' collectives, or None without a process group. Collective:
    every rank calls it at the same point (every rank calls save)."""
    global _group
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.group.WORLD
    if _group is None or _group[0] is not world:  # a new default group (re-initialised) needs a new one
        _group = (world, dist.new_group(backend="gloo"))
    return _group[1]


def _forget_in_child() -> None:
    # A process forked while a save was in flight (a DataLoader worker) has no such thread.
    global _lock, _pending, _group
    _lock = threading.Lock()
    _pending = None
    _group = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)

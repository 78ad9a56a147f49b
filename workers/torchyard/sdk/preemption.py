"""Lossless preemption, the rank's side: hear the request, checkpoint, yield.

When the queue needs a job's GPUs for a job of higher priority (or a project reclaims its quota),
the controller asks each node of it to checkpoint and yield: the agent writes a file into the node's
run directory, whose path every rank has in ``TORCHYARD_PREEMPT_FILE``. A training loop checks
``preemption_requested()`` (a cached ``stat``, cheap enough for every step), saves a checkpoint at
once and calls ``yield_for_preemption()``, which exits the rank with a status of its own: the node
reports that it yielded, the job waits in the queue as ``preempted`` and resumes from that checkpoint
when it can run again. A job that does not yield within ``preemption.grace`` seconds is stopped and
resumes from its last committed checkpoint; a save in progress (``committing()``) is waited for.

Ranks of one job see the file at slightly different moments; a loop whose save is a collective
(every rank saves, all-or-nothing) asks ``should_yield()`` instead, which agrees across ranks.
Off Torchyard nothing is ever requested.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn, cast

from torchyard import protocol
from torchyard.sdk import context, events

__all__ = ["committing", "preemption_requested", "request", "should_yield", "yield_for_preemption"]

# How long a look at the request file is trusted: a training step may ask every few milliseconds.
CACHE_SECONDS = 0.5
@dataclass
class _Look:
    """The last look at the request file: its path, when, and whether it was there."""

    path: str | None = None
    checked: float = 0.0
    requested: bool = False


_cache = _Look()


def _path() -> str:
    return os.environ.get(protocol.ENV_PREEMPT_FILE, "").strip()


def preemption_requested() -> bool:
    """True once this node was asked to checkpoint and yield (stays True). A stat of one file at
    most every half second; always False off Torchyard."""
    path = _path()
    if not path:
        return False
    now = time.monotonic()
    if _cache.path == path and (_cache.requested or now - _cache.checked < CACHE_SECONDS):
        return _cache.requested
    _cache.path, _cache.checked, _cache.requested = path, now, os.path.exists(path)
    return _cache.requested


def request() -> protocol.PreemptRequest:
    """What the request says (``grace`` seconds, ``reason``, ``at``), or {} when there is none."""
    path = _path()
    if not path:
        return {}
    try:
        with open(path, encoding="utf-8") as handle:
            value = json.load(handle)
    except (OSError, ValueError):
        return {}
    # As the agent wrote it (node/preemption.py write_request).
    return cast("protocol.PreemptRequest", value) if isinstance(value, dict) else {}


# Under fault_tolerance.mode in_place: whether any replica had seen a request by the last committed step
# (sdk/resilient.py sums the flag inside every step); None otherwise.
_replicas_agreed: bool | None = None


def replicas_agreed(flag: bool) -> None:
    """What the replicas agreed in their last committed step (sdk/resilient.py, in_place only)."""
    global _replicas_agreed
    _replicas_agreed = flag


def should_yield() -> bool:
    """``preemption_requested()`` agreed by every rank: True on all of them at the same call once any
    one saw the request. Call it at the same point of every step on every rank (it is a collective
    of one number when the job is distributed), then save and yield together."""
    mine = preemption_requested()
    from torchyard.sdk import distributed

    if not distributed.is_initialized() or context.world_size() <= 1:
        # fault_tolerance.mode in_place: no process group of the job; the replicas agreed in their last
        # committed step (sdk/resilient.py says so here).
        return mine if _replicas_agreed is None or context.world_size() <= 1 else _replicas_agreed
    import torch
    import torch.distributed as dist

    flag = torch.tensor([1 if mine else 0], dtype=torch.int32, device=distributed.device())
    dist.all_reduce(flag, op=dist.ReduceOp.MAX)
    return bool(flag.item())


def _run_dir_file(name: str) -> str | None:
    path = _path()
    return os.path.join(os.path.dirname(path), name) if path else None


@contextlib.contextmanager
def committing() -> Iterator[None]:
    """Around a checkpoint save: the supervisor does not stop the node for an expired grace while a
    rank is inside (a commit cut in half would be lost work, however short)."""
    marker = _run_dir_file(f"{protocol.COMMITTING_PREFIX}{context.rank()}")
    if marker is not None:
        with contextlib.suppress(OSError), open(marker, "w", encoding="utf-8") as handle:
            handle.write(str(time.time()))
    try:
        yield
    finally:
        if marker is not None:
            with contextlib.suppress(OSError):
                os.unlink(marker)


def yield_for_preemption(step: int | None = None) -> NoReturn:
    """Leave the job for the preempting one, after the checkpoint committed: waits for a background
    save, ends the process group, and exits with the status that tells the node it yielded (not
    failed). The job resumes from its latest checkpoint when it runs again."""
    from torchyard.sdk import checkpoint, distributed

    checkpoint.wait()
    marker = _run_dir_file(protocol.YIELDED_FILE)
    if marker is not None:
        with contextlib.suppress(OSError), open(marker, "a", encoding="utf-8") as handle:
            handle.write(json.dumps({"rank": context.rank(), "step": step, "ts": time.time()}) + "\n")
    print(f"[torchyard] rank {context.rank()}: yielding for preemption"
          + (f" after step {step}" if step is not None else ""), file=sys.stderr, flush=True)
    with contextlib.suppress(Exception):
        if distributed.is_initialized():
            distributed.shutdown_process_group()
    events.channel().flush(timeout=5.0)
    sys.stdout.flush()
    sys.exit(protocol.YIELD_EXIT_CODE)

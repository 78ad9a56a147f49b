"""Large host-memory copies side by side: a checkpoint's staging copy and its load both make the
training loop wait, and one memory copy on one core reaches about half of what two reach on this
machine kind. torch's intra-op threads are not used for it because ranks usually run with one
(torchrun sets OMP_NUM_THREADS=1); this rank's share of the node's CPUs is (context.cpu_share).
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from torchyard.sdk import context

PIECE_BYTES = 32 << 20
# Below this the copies run on the calling thread: handing pieces out costs more than it saves.
PARALLEL_BYTES = 64 << 20
MAX_THREADS = 8

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def copy_all(pairs: list[tuple[Any, Any]]) -> None:
    """``target.copy_(source)`` for every (target, source) pair of host tensors; raises the first
    error once every copy is over."""
    total = sum(source.numel() * source.element_size() for _, source in pairs)
    if total < PARALLEL_BYTES or context.cpu_share(MAX_THREADS) < 2:
        for target, source in pairs:
            target.copy_(source)
        return
    pieces = [piece for target, source in pairs for piece in _pieces(target, source)]
    # list(): wait for every piece (tensor.copy_ releases the GIL)
    list(_threads().map(lambda pair: pair[0].copy_(pair[1]), pieces))


def _threads() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(context.cpu_share(MAX_THREADS), thread_name_prefix="torchyard-copy")
        return _pool


def _pieces(target, source) -> list:
    """(target, source) cut into pieces of about PIECE_BYTES along flat views when both are
    contiguous; the pair itself otherwise."""
    nbytes = source.numel() * source.element_size()
    if nbytes <= PIECE_BYTES or not (target.is_contiguous() and source.is_contiguous()):
        return [(target, source)]
    flat_target, flat_source = target.view(-1), source.view(-1)
    step = max(1, PIECE_BYTES // source.element_size())
    return [(flat_target[i : i + step], flat_source[i : i + step]) for i in range(0, source.numel(), step)]

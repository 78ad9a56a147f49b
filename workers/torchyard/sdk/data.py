"""Splitting data between ranks."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from typing import TypeVar

from torchyard.sdk import context

T = TypeVar("T")


def shard(items: Iterable[T], rank: int | None = None, world_size: int | None = None) -> list[T]:
    """This rank's share of ``items``: ``items[rank::world_size]`` (deterministic round-robin).

    Every rank must pass the same items in the same order; the shares are disjoint and together
    cover every item. Outside a distributed launch the share is everything.
    """
    rank = context.rank() if rank is None else rank
    world_size = context.world_size() if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    if isinstance(items, Sequence):
        return list(items[rank::world_size])
    return list(itertools.islice(items, rank, None, world_size))

"""Splitting data between ranks, and where in the data a job is (its global sample position).

The position is global, not per rank: the number of samples every rank together has consumed. A
checkpoint that records it resumes at the same sample on any world size (an elastic job that shrank
from 3 nodes to 2, or grew back), so no sample is seen twice or skipped across the resize.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterable, Sequence
from typing import NotRequired, TypedDict, TypeVar

from torchyard.sdk import context
from torchyard.sdk.line_shards import LineShards, ShardPosition, line_shards

__all__ = ["GlobalSampler", "LineShards", "ShardPosition", "line_shards", "shard"]

T = TypeVar("T")


def _ranks(rank: int | None, world_size: int | None) -> tuple[int, int]:
    rank = context.rank() if rank is None else rank
    world_size = context.world_size() if world_size is None else world_size
    if world_size < 1 or not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
    return rank, world_size


def shard(items: Iterable[T], rank: int | None = None, world_size: int | None = None, *, start: int = 0) -> list[T]:
    """This rank's share of ``items[start:]``: ``items[start + rank::world_size]`` (deterministic
    round-robin).

    Every rank must pass the same items in the same order; the shares are disjoint and together
    cover every item from ``start``. ``start`` is a global position (items every rank together has
    consumed), so a job resumed at another world size with the position it saved goes on at the same
    item. Outside a distributed launch the share is everything.
    """
    rank, world_size = _ranks(rank, world_size)
    if isinstance(start, bool) or not isinstance(start, int) or start < 0:
        raise ValueError(f"start must be a global position, 0 or more, got {start!r}")
    if isinstance(items, Sequence):
        return list(items[start + rank::world_size])
    return list(itertools.islice(items, start + rank, None, world_size))



class SamplerState(TypedDict):
    """A sampler's place, as a checkpoint keeps it."""

    position: int  # in the global order
    seed: NotRequired[int]  # (a position alone resumes with the sampler's own seed)
    size: NotRequired[int]

class GlobalSampler:
    """This rank's sample indices, batch after batch, by global position.

    Each call of ``next_batch()`` takes the next global batch (``batch_size`` per rank times the
    world size) from ``position``: rank r gets its ``batch_size`` indices in a row, r-th of the
    batch, and ``position`` moves past the whole global batch on every rank alike. Indices wrap
    around ``size`` (the dataset's length; epochs), in a per-epoch shuffled order with ``shuffle``
    (the same ``seed`` on every rank). Save ``state_dict()`` in the checkpoint (rank 0's, the same on
    every rank) and give it to ``load_state_dict()`` on resume: whatever the new world size and
    per-rank batch (sdk.config() recomputes it), the job continues at the same global sample.

        sampler = sdk.GlobalSampler(len(dataset), batch_size=hp["batch_size"])
        resumed = sdk.checkpoint.load_latest()
        if resumed:
            sampler.load_state_dict(resumed[0]["data"])
        for step in ...:
            batch = [dataset[i] for i in sampler.next_batch()]
            ...
            sdk.checkpoint.save({"model": ..., "data": sampler.state_dict()}, step)
    """

    def __init__(self, size: int, *, batch_size: int, rank: int | None = None, world_size: int | None = None,
                 position: int = 0, shuffle: bool = False, seed: int = 0) -> None:
        self.rank, self.world_size = _ranks(rank, world_size)
        for name, value, least in (("size", size, 1), ("batch_size", batch_size, 1), ("position", position, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an integer of {least} or more, got {value!r}")
        self.size, self.batch_size, self.position = size, batch_size, position
        self.shuffle, self.seed = shuffle, seed
        self._order: tuple[int, list[int]] | None = None

    @property
    def global_batch_size(self) -> int:
        return self.batch_size * self.world_size

    @property
    def epoch(self) -> int:
        return self.position // self.size

    def _index(self, position: int) -> int:
        epoch, offset = divmod(position, self.size)
        if not self.shuffle:
            return offset
        if self._order is None or self._order[0] != epoch:
            order = list(range(self.size))
            random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
            self._order = (epoch, order)
        return self._order[1][offset]

    def peek(self) -> list[int]:
        """This rank's indices of the next global batch, without moving."""
        first = self.position + self.rank * self.batch_size
        return [self._index(p) for p in range(first, first + self.batch_size)]

    def next_batch(self) -> list[int]:
        """This rank's indices of the next global batch; the position moves past the global batch."""
        indices = self.peek()
        self.position += self.global_batch_size
        return indices

    def state_dict(self) -> SamplerState:
        """What a checkpoint keeps: the global position (and the order's seed), no per-rank state."""
        return {"position": self.position, "seed": self.seed, "size": self.size}

    def load_state_dict(self, state: SamplerState) -> None:
        position = state.get("position")
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"a sampler state needs a global position, 0 or more; got {position!r}")
        self.position = position
        self.seed = int(state.get("seed", self.seed))
        self._order = None

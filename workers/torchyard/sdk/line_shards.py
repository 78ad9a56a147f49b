"""Line-per-record shard files, split between ranks, with an exact position for checkpoints.

The Rust coordinator's data plane: a dataset is a directory (or an ``s3://bucket/prefix``) of text files, one
record per line. Every rank lists the same files in the same (sorted) order and takes every
world-size-th file, starting at its rank (round-robin by rank), so ranks never exchange data. S3
files are downloaded when a rank first reaches them and kept in a local cache.

The position of every rank (its epoch, the shard it is in, the next line of that shard, the lines
it has read) is a small JSON-able state that goes into the checkpoint; a job resumed from that
checkpoint reads on at the line after the last one the checkpointed step consumed, so no line is
read twice or skipped across a recovery.

    lines = sdk.data.line_shards(os.environ["DATASET_DIR"])
    resumed = sdk.checkpoint.load_latest()
    if resumed:
        lines.load_state_dict(resumed[0]["data"])
    for step, line in enumerate(lines, start=lines.position.step + 1):
        ...
        if step % every == 0:
            sdk.checkpoint.save({"model": ..., "data": lines.state_dict()}, step)  # every rank
"""

from __future__ import annotations

import fnmatch
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from torchyard.sdk import context, distributed
from torchyard.storage import s3_client

FORMAT = "torchyard-line-shards/1"
CACHE_ENV = "TORCHYARD_SHARD_CACHE"


@dataclass(frozen=True)
class ShardPosition:
    """Where a rank is: ``shard_idx`` indexes the sorted list of every shard, ``line_idx`` is the
    next line to read in it, ``offset`` that line's byte offset, ``step`` the lines read so far."""

    epoch: int = 0
    shard_idx: int = -1  # -1: before this rank's first shard
    line_idx: int = 0
    offset: int = 0
    step: int = 0


class PositionState(TypedDict):
    """A ShardPosition as a checkpoint keeps it."""

    epoch: int
    shard_idx: int
    line_idx: int
    offset: int
    step: int


class LineShardsState(TypedDict):
    """Every rank's position, as a checkpoint keeps it (rank 0's copy holds them all)."""

    format: str  # FORMAT
    source: str
    shards: int
    world_size: int
    ranks: dict[str, PositionState]  # by rank


def _is_s3(source: str) -> bool:
    return source.startswith("s3://")


def _split_s3(url: str) -> tuple[str, str]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    if not bucket:
        raise ValueError(f"{url!r} names no bucket (s3://bucket/prefix)")
    return bucket, prefix


def default_cache_dir() -> Path:
    """TORCHYARD_SHARD_CACHE, else $XDG_CACHE_HOME (or ~/.cache)/torchyard/shards."""
    explicit = os.environ.get(CACHE_ENV, "").strip()
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME", "").strip() or str(Path.home() / ".cache")
    return Path(base) / "torchyard" / "shards"


class LineShards:
    """This rank's lines of a sharded line dataset; see the module docstring and ``line_shards``."""

    def __init__(self, source: str, *, rank: int | None = None, world_size: int | None = None,
                 pattern: str = "*", repeat: bool = False, cache_dir: str | os.PathLike | None = None) -> None:
        self.source = str(source)
        self.rank = context.rank() if rank is None else rank
        self.world_size = context.world_size() if world_size is None else world_size
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"rank {self.rank} is outside 0..{self.world_size - 1}")
        self.pattern, self.repeat = pattern, repeat
        self.cache_dir = Path(cache_dir) if cache_dir is not None else default_cache_dir()
        self._client: Any = None
        self.shards = self._list()
        if not self.shards:
            raise FileNotFoundError(f"no shard files matching {pattern!r} in {self.source}")
        # This rank's shards, as indices into self.shards.
        self.mine = list(range(self.rank, len(self.shards), self.world_size))
        self.position = ShardPosition()
        self.last_id: str | None = None

    # --- listing and fetching ---------------------------------------------------------------------
    def _list(self) -> list[str]:
        """Every shard's file name in the source (one level, no folders), sorted: the same on every rank."""
        if _is_s3(self.source):
            bucket, prefix = _split_s3(self.source)
            prefix = prefix.rstrip("/") + "/" if prefix else ""
            names = []
            for page in self._s3().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
                names += [item["Key"][len(prefix):] for item in page.get("Contents", [])]
        else:
            root = Path(self.source)
            if root.is_file():
                return [root.name]
            if not root.is_dir():
                raise FileNotFoundError(f"{self.source} is neither a directory of shards nor a file")
            names = [p.name for p in root.iterdir() if p.is_file()]
        return sorted(n for n in names if n and "/" not in n and not n.startswith(".")
                      and fnmatch.fnmatch(n, self.pattern))

    def _s3(self) -> Any:
        if self._client is None:
            self._client = s3_client()
        return self._client

    def local_path(self, shard_idx: int) -> Path:
        """A local file with shard ``shard_idx``'s content: the file itself, or its cached copy
        (downloaded on first use; a copy with the object's size and modification time is reused)."""
        name = self.shards[shard_idx]
        if not _is_s3(self.source):
            root = Path(self.source)
            return root if root.is_file() else root / name
        bucket, prefix = _split_s3(self.source)
        key = f"{prefix.rstrip('/')}/{name}" if prefix else name
        cached = self.cache_dir / bucket / key
        head = self._s3().head_object(Bucket=bucket, Key=key)
        size, modified = head["ContentLength"], int(head["LastModified"].timestamp())
        if cached.is_file() and (cached.stat().st_size, int(cached.stat().st_mtime)) == (size, modified):
            return cached
        cached.parent.mkdir(parents=True, exist_ok=True)
        # A temporary name and a rename: ranks on one machine may fetch the same shard at once,
        # and a download cut short must never pass for the shard.
        fd, partial = tempfile.mkstemp(dir=cached.parent, prefix=f".{cached.name}.")
        try:
            with os.fdopen(fd, "wb") as out:
                self._s3().download_fileobj(bucket, key, out)
            os.utime(partial, (modified, modified))  # what a later use compares with the object's
            os.replace(partial, cached)
        except BaseException:
            Path(partial).unlink(missing_ok=True)
            raise
        return cached

    # --- reading ----------------------------------------------------------------------------------
    def __iter__(self) -> Iterator[str]:
        """This rank's lines (without their line ending) from the current position on."""
        while True:
            # A position in none of this rank's shards starts an epoch at its first shard.
            fresh = self.position.shard_idx not in self.mine
            start = 0 if fresh else self.mine.index(self.position.shard_idx)
            read_any = False
            for shard_idx in self.mine[start:]:
                for line in self._read(shard_idx):
                    read_any = True
                    yield line
            # A whole epoch with no line would start over for ever.
            if not self.repeat or (fresh and not read_any):
                return
            self.position = ShardPosition(epoch=self.position.epoch + 1, step=self.position.step)

    def _read(self, shard_idx: int) -> Iterator[str]:
        pos = self.position
        line_idx, offset = (pos.line_idx, pos.offset) if pos.shard_idx == shard_idx else (0, 0)
        self.position = ShardPosition(pos.epoch, shard_idx, line_idx, offset, pos.step)
        with open(self.local_path(shard_idx), "rb") as handle:
            handle.seek(offset)
            for raw in handle:
                # The position moves before the line is handed out: a checkpoint taken after the
                # caller used it resumes at the next one.
                offset += len(raw)
                self.position = ShardPosition(pos.epoch, shard_idx, line_idx + 1, offset, self.position.step + 1)
                self.last_id = f"{self.shards[shard_idx]}:{line_idx}"
                line_idx += 1
                yield raw.decode("utf-8").removesuffix("\n").removesuffix("\r")

    # --- checkpoint state -------------------------------------------------------------------------
    def state_dict(self) -> LineShardsState:
        """The position of every rank, for the checkpoint. In a distributed run every rank must
        call it (it gathers the ranks' positions, as checkpoint.save gathers its results); rank
        0's copy, which checkpoint.save writes, then holds them all."""
        mine: dict[str, PositionState] = {str(self.rank): {
            "epoch": self.position.epoch, "shard_idx": self.position.shard_idx, "line_idx": self.position.line_idx,
            "offset": self.position.offset, "step": self.position.step}}
        ranks: dict[str, PositionState] = {}
        if distributed.is_initialized() and self.world_size > 1:
            import torch.distributed as dist

            gathered: list[Any] = [None] * dist.get_world_size()
            dist.all_gather_object(gathered, mine)
            for part in gathered:
                ranks.update(part)
        else:
            ranks = mine
        return {"format": FORMAT, "source": self.source, "shards": len(self.shards),
                "world_size": self.world_size, "ranks": ranks}

    def load_state_dict(self, state: LineShardsState) -> None:
        """Go on from a checkpointed state: this rank reads on at the line after its last one."""
        if not isinstance(state, dict) or state.get("format") != FORMAT:
            raise ValueError(f"not a line-shards position ({FORMAT}): {state!r:.200}")
        if state["shards"] != len(self.shards):
            raise ValueError(f"the checkpoint was taken over {state['shards']} shard files; {self.source} "
                             f"has {len(self.shards)} now: the same dataset is needed to resume exactly")
        if state["world_size"] != self.world_size:
            raise ValueError(f"the checkpoint's line positions are those of {state['world_size']} ranks; this "
                             f"run has {self.world_size} (shards are assigned by rank: resume with the same world size)")
        own = state["ranks"].get(str(self.rank))
        if own is None:
            raise ValueError(f"the checkpoint holds no position for rank {self.rank}")
        self.position = ShardPosition(**own)


def line_shards(source: str | os.PathLike, *, rank: int | None = None, world_size: int | None = None,
                pattern: str = "*", repeat: bool = False, cache_dir: str | os.PathLike | None = None) -> LineShards:
    """This rank's lines of the shard files in ``source`` (a directory, one file, or
    ``s3://bucket/prefix``), an iterable whose ``position`` and ``state_dict()`` go into checkpoints.

    Files whose names match ``pattern`` (hidden ones skipped) are sorted by name and assigned
    round-robin by rank: rank r reads files r, r + world_size, ... in that order, line by line.
    ``repeat=True`` starts over (the next epoch) after the last one. S3 shards are fetched with the
    SDK's S3 client (S3_ENDPOINT_URL / AWS_* as for checkpoints) into ``cache_dir`` (default
    TORCHYARD_SHARD_CACHE, else ~/.cache/torchyard/shards) when first read. ``last_id`` names the
    line just read (``"<file>:<line index>"``). Outside a distributed launch one rank reads all.
    """
    return LineShards(str(source), rank=rank, world_size=world_size, pattern=pattern, repeat=repeat,
                      cache_dir=cache_dir)

"""Reading a DCP file's tensors straight from the page cache into the state: one copy per byte.

DCP's own reader torch.loads every item into a fresh tensor (the file's bytes read into new
memory, page-faulted in) and then copies that into the state: two copies and an allocation per
byte. Here each file is mapped once, each item's pickle is read with ``map_location="meta"`` (its
shape, strides and dtype, and where its bytes sit in the file, nothing else), and the bytes are
copied from the mapping into the state's tensor, side by side (copying.py).

Anything this path does not cover (an item saved with a transform such as compression, a byte
order other than this machine's, a view whose bytes are not aligned for its dtype, a storage
whose offset torch did not report) is handed back to DCP's reader, which handles every case.
"""

from __future__ import annotations

import contextlib
import mmap
import sys
from typing import IO, Any, cast

import torch
from torch.distributed.checkpoint.planner import LoadItemType, ReadItem
from torch.distributed.checkpoint.utils import _create_file_view

from torchyard.sdk.checkpoint import copying


def read_file(path: str, reqs: list[ReadItem], storage_data: dict, planner: Any) -> list[ReadItem]:
    """Load every tensor item of ``reqs`` (all stored in ``path``) that this path covers into the
    planner's state; returns the items left for DCP's reader."""
    if sys.byteorder != "little":
        return list(reqs)
    left: list[ReadItem] = []
    copies: list[tuple[ReadItem, torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []
    with open(path, "rb") as stream, _mapping(stream) as mapped:
        for req in reqs:
            saved = _saved_item(stream, mapped, storage_data[req.storage_index], req)
            if saved is None:
                left.append(req)
                continue
            target = planner.resolve_tensor(req).detach()
            if target.size() != saved.size:
                raise AssertionError(f"req {req.storage_index} mismatch sizes {target.size()} vs {saved.size}")
            pair = saved.copy_pair(target)
            if pair is None:
                left.append(req)
                continue
            copies.append((req, target, pair))
        copying.copy_all([pair for _, _, pair in copies])
        for req, target, _ in copies:
            planner.commit_tensor(req, target)
        copies.clear()  # the views into the mapping must be gone before it is closed
    return left


class _Saved:
    """Where one saved tensor's bytes sit in the mapping, and its shape there."""

    def __init__(self, raw: torch.Tensor, meta: torch.Tensor, offsets, lengths) -> None:
        self.raw = raw  # the storage's bytes, a uint8 view of the mapping
        self.meta = meta  # dtype, shape, strides, storage offset
        self.offsets, self.lengths = offsets, lengths
        self.size = torch.Size(lengths)

    def copy_pair(self, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor] | None:
        """(destination, source) whose copy_ loads ``target``; None when this path cannot."""
        meta = self.meta
        whole = tuple(self.offsets) == (0,) * meta.dim() and self.size == meta.size()
        if whole and meta.is_contiguous() and meta.storage_offset() == 0 and target.is_contiguous():
            # The common case: byte for byte, whatever the alignment of the bytes in the file.
            nbytes = meta.numel() * meta.element_size()
            return target.reshape(-1).view(torch.uint8), self.raw[:nbytes]
        if self.raw.data_ptr() % meta.element_size():
            return None  # a typed view needs aligned bytes: DCP's reader copies them first
        saved = self.raw.view(meta.dtype).as_strided(meta.size(), meta.stride(), meta.storage_offset())
        for dim, (start, length) in enumerate(zip(self.offsets, self.lengths, strict=True)):
            if start != 0 or length != saved.size(dim):
                saved = saved.narrow(dim, start, length)  # the part a resharded load needs
        return target, saved


@contextlib.contextmanager
def _mapping(stream):
    # A private mapping is writable (torch.frombuffer wants that) yet never changes the file.
    mapped = mmap.mmap(stream.fileno(), 0, access=mmap.ACCESS_COPY)
    try:
        yield mapped
    finally:
        with contextlib.suppress(BufferError):  # a view still alive: the mapping goes with it
            mapped.close()


def _saved_item(stream, mapped: mmap.mmap, info: Any, req: ReadItem) -> _Saved | None:
    """The item's saved tensor in the mapping; None when this path does not cover it."""
    if req.type == LoadItemType.BYTE_IO or info.transform_descriptors:
        return None
    item = cast(IO[bytes], _create_file_view(stream, info.offset, info.length))
    meta = torch.load(item, map_location="meta", weights_only=True)
    if not isinstance(meta, torch.Tensor) or meta.layout != torch.strided or meta.is_quantized:
        return None
    storage = meta.untyped_storage()
    record = getattr(storage, "_checkpoint_offset", None)
    if record is None or storage.nbytes() == 0:
        return None  # no offset reported, or no bytes to map (an empty tensor)
    start = info.offset + record
    if start + storage.nbytes() > info.offset + info.length:
        return None  # a storage reaching past the item: not what DCP writes; let DCP's reader judge
    raw = torch.frombuffer(mapped, dtype=torch.uint8, count=storage.nbytes(), offset=start)
    return _Saved(raw, meta, req.storage_offsets, req.lengths)

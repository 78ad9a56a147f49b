"""The copy of a training state that an async save writes, taken while the training loop waits.

Tensors in dicts, lists and tuples (and DTensors' local shards) are copied into host memory the
loop never touches: pinned when they come from a GPU, so the copy runs at the bus's speed. The
buffers are kept for the next save of the same shapes: the first save pays for the allocation
(page faults, pinning), the later ones are a plain memory copy. Anything else is deep-copied, so
the loop may change it freely once save() has returned. The loop waits for the host-to-host copies: they run side by side (copying.py).
"""

from __future__ import annotations

import collections
import copy
import sys
from typing import Any

from torchyard.sdk.checkpoint import copying


class Stager:
    """Copies states into buffers it keeps between saves; at most one staged state is in use at a
    time (the caller waits for the previous save before staging the next)."""

    def __init__(self) -> None:
        self._buffers: dict[tuple, Any] = {}

    def stage(self, state: Any, *, stateful_to_dict: bool = False) -> Any:
        """A copy of ``state`` nobody else holds. With ``stateful_to_dict`` (sharded saves),
        top-level objects with ``state_dict()`` are replaced by it, as torch.distributed.checkpoint
        does when it saves."""
        import torch

        if stateful_to_dict and isinstance(state, dict):
            from torch.distributed.checkpoint.stateful import Stateful

            state = {k: v.state_dict() if isinstance(v, Stateful) else v for k, v in state.items()}
        used: dict[tuple, Any] = {}
        staged_by_id: dict[int, Any] = {}  # the same tensor twice (tied weights) stays one tensor
        devices: set[Any] = set()
        host_copies: list[tuple[torch.Tensor, torch.Tensor]] = []

        def tensor(path: tuple, value: torch.Tensor) -> torch.Tensor:
            source = value.detach()
            if source.layout != torch.strided or source.is_quantized or source.is_meta:
                return source.clone()  # rare kinds: a copy where they are, as torch.save takes them
            pinned = source.is_cuda
            buffer = self._buffers.get(path)
            wanted = (source.shape, source.dtype, pinned)
            if buffer is None or (buffer[0].shape, buffer[0].dtype, buffer[1]) != wanted:
                buffer = (torch.empty(source.shape, dtype=source.dtype, pin_memory=pinned), pinned)
            used[path] = buffer
            if pinned:
                buffer[0].copy_(source, non_blocking=True)  # queued on the GPU's stream, not waited for
                devices.add(source.device)
            else:
                host_copies.append((buffer[0], source))
            return buffer[0]

        def walk(path: tuple, value: Any) -> Any:
            if id(value) in staged_by_id:
                return staged_by_id[id(value)]
            staged: Any
            if isinstance(value, torch.Tensor):
                dtensor = _dtensor_type()
                if dtensor is not None and isinstance(value, dtensor):
                    # A CPU shard under the same spec, as torch.distributed.checkpoint's own stager
                    # builds it: DCP reads only the spec (shape, placements) and the local data.
                    local = tensor(path, value.to_local())
                    staged = dtensor(local, value._spec, requires_grad=False)
                else:
                    staged = tensor(path, value)
            elif type(value) in (dict, collections.OrderedDict):
                staged = type(value)((k, walk((*path, k), v)) for k, v in value.items())
            elif type(value) in (list, tuple):
                staged = type(value)(walk((*path, i), v) for i, v in enumerate(value))
            elif isinstance(value, tuple) and hasattr(value, "_fields"):  # a namedtuple
                staged = type(value)(*(walk((*path, i), v) for i, v in enumerate(value)))
            elif value is None or isinstance(value, (bool, int, float, str, bytes)):
                return value
            else:
                staged = copy.deepcopy(value)
            staged_by_id[id(value)] = staged
            return staged

        result = walk((), state)
        copying.copy_all(host_copies)
        for device in devices:
            # The loop may overwrite its tensors as soon as save() returns: the copies must be done.
            torch.cuda.current_stream(device).synchronize()
        self._buffers = used
        return result

    def nbytes(self) -> int:
        """Host memory held for the next save."""
        return sum(b[0].numel() * b[0].element_size() for b in self._buffers.values())


def _dtensor_type():
    # No DTensor exists unless its module was imported, and importing it costs seconds.
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)

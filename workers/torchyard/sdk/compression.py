"""Gradient compression for DDP, and what it saves, measured.

A job's ``compression`` section picks a DDP communication hook: ``none`` (plain all-reduce, counted:
the baseline), ``fp16`` / ``bf16`` (torch's casting hooks), ``powersgd`` (torch's PowerSGD:
low-rank P and Q all-reduced instead of each gradient matrix; ``rank``, ``start_iter``) or ``topk``
(this module's Top-K sparsification: each rank sends only the ``ratio`` largest gradient entries,
keeping the rest as error feedback for its next step).

Every hook talks to the other ranks through a counting process group: a wrapper that measures each
tensor a hook hands to all-reduce or all-gather before the real group sends it. So the bytes on the
job's page (``comm_bytes_per_step``, next to ``grad_bytes_per_step``, the gradient bytes the hook
was given) are the hook's own traffic, whatever it does inside (PowerSGD's P, Q and uncompressed
biases included), not an estimate. They count this rank's payload; a ring all-reduce puts about
2(n-1)/n times that on the wire and an all-gather (n-1) times, so at two ranks both equal it.

torch is imported inside the functions; the hooks' names and settings are in torchyard.sdk.choices.
"""

from __future__ import annotations

import math
import threading
from typing import Any

from torchyard.sdk.choices import HOOK_SETTINGS, HOOKS, MIN_START_ITER

COUNTER_ATTR = "_torchyard_comm_counter"


class CommCounter:
    """Bytes a rank's hook handed to collectives, and the gradient bytes it was given, per step.

    Collectives complete on the process group's threads (PowerSGD all-reduces Q from a callback),
    so every update takes the lock.
    """

    def __init__(self, hook: str) -> None:
        self.hook = hook
        self.sent_bytes = 0
        self.grad_bytes = 0
        self.steps = 0
        self._lock = threading.Lock()
        self._read = (0, 0, 0)

    def add_sent(self, tensors) -> None:
        size = sum(t.numel() * t.element_size() for t in tensors)
        with self._lock:
            self.sent_bytes += size

    def add_bucket(self, bucket) -> None:
        buffer = bucket.buffer()
        with self._lock:
            self.grad_bytes += buffer.numel() * buffer.element_size()
            # DDP hands the buckets of a step in turn; the last one ends the step.
            if bucket.is_last():
                self.steps += 1

    def window(self) -> dict[str, float]:
        """Per-step means since the previous call (what the recipes report), {} without a new step.

        Read after backward() returns: DDP has then waited for every bucket's future, so each step
        counted is complete."""
        with self._lock:
            now = (self.sent_bytes, self.grad_bytes, self.steps)
        sent, grad, steps = (a - b for a, b in zip(now, self._read, strict=True))
        self._read = now
        if steps <= 0:
            return {}
        return {
            "comm_bytes_per_step": sent / steps,
            "grad_bytes_per_step": grad / steps,
            "compression_ratio": grad / sent if sent else 0.0,
        }


class CountingGroup:
    """A process group that counts what it is asked to send, then lets the real group send it.

    torch.distributed's collectives call ``group.allreduce`` / ``group.allgather`` and the hooks
    ``group.size()``; everything else is the real group's.
    """

    def __init__(self, group, counter: CommCounter) -> None:
        self._group, self._counter = group, counter

    def size(self) -> int:
        return self._group.size()

    def rank(self) -> int:
        return self._group.rank()

    def allreduce(self, tensors, opts):
        self._counter.add_sent(tensors)
        return self._group.allreduce(tensors, opts)

    def allgather(self, output_lists, inputs, opts):
        self._counter.add_sent(inputs)
        return self._group.allgather(output_lists, inputs, opts)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._group, name)


def resolve(settings: dict[str, Any] | None) -> dict[str, Any] | None:
    """The hook and its settings (defaults filled in) that ``settings`` asks for, None when off.

    The JobSpec is validated by the server already; this is for scripts that call ``wrap_ddp``
    with settings of their own, and it raises ValueError with the setting named.
    """
    if not settings or not settings.get("enabled", "hook" in settings):
        return None
    hook = str(settings.get("hook") or "fp16").lower()
    if hook not in HOOKS:
        raise ValueError(f"unknown compression hook {hook!r}; expected one of {', '.join(HOOKS)}")
    resolved: dict[str, Any] = {"hook": hook, **HOOK_SETTINGS.get(hook, {})}
    for key in ("rank", "start_iter", "ratio"):
        if settings.get(key) is None:
            continue
        if key not in resolved:
            raise ValueError(f"compression {key} is a setting of the "
                             f"{next(h for h, s in HOOK_SETTINGS.items() if key in s)} hook, not of {hook}")
        resolved[key] = settings[key]
    if hook == "powersgd":
        if int(resolved["rank"]) < 1:
            raise ValueError(f"compression rank must be 1 or more, got {resolved['rank']!r}")
        if int(resolved["start_iter"]) < MIN_START_ITER:
            raise ValueError(f"compression start_iter must be {MIN_START_ITER} or more (PowerSGD needs plain "
                             f"all-reduce steps while DDP settles its buckets), got {resolved['start_iter']!r}")
    if hook == "topk" and not 0 < float(resolved["ratio"]) <= 1:
        raise ValueError(f"compression ratio must be above 0 and at most 1, got {resolved['ratio']!r}")
    return resolved


def register(ddp, settings: dict[str, Any] | None, *, warn=None) -> CommCounter | None:
    """Register the hook ``settings`` ask for on a DistributedDataParallel model, counted; returns
    its counter (also kept on the model for ``metrics``), or None when compression is off."""
    resolved = resolve(settings)
    if resolved is None:
        return None
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    hook_name = resolved["hook"]
    if hook_name == "bf16" and dist.get_backend() != "nccl":
        # DDP refuses the bf16 hook outside NCCL (and XCCL); fp16 halves the bytes just the same.
        if warn is not None:
            warn("bf16 gradient compression needs nccl; using fp16")
        hook_name = "fp16"
    counter = CommCounter(hook_name)
    group = CountingGroup(ddp.process_group, counter)
    state: Any
    hook: Any
    if hook_name == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=group,
            matrix_approximation_rank=int(resolved["rank"]),
            start_powerSGD_iter=int(resolved["start_iter"]),
        )
        hook = powerSGD_hook.powerSGD_hook
    elif hook_name == "topk":
        state, hook = TopKState(group, float(resolved["ratio"])), topk_hook
    else:
        state = group
        hook = {"none": default_hooks.allreduce_hook, "fp16": default_hooks.fp16_compress_hook,
                "bf16": default_hooks.bf16_compress_hook}[hook_name]
    ddp.register_comm_hook(state, _counted(hook, counter))
    setattr(ddp, COUNTER_ATTR, counter)
    return counter


def _counted(hook, counter: CommCounter):
    # DDP reads the hook's signature: the parameter must be called `bucket`, and unannotated (or
    # annotated with the GradBucket class itself, which postponed annotations would turn into text).
    def counted_hook(state, bucket):
        counter.add_bucket(bucket)
        return hook(state, bucket)

    counted_hook.__qualname__ = f"counted({getattr(hook, '__qualname__', hook)})"
    return counted_hook


def metrics(model) -> dict[str, float]:
    """The model's communication per step since the last call ({} without a counted hook): pass
    them to ``sdk.report`` so the job's page shows them."""
    counter = getattr(model, COUNTER_ATTR, None)
    return counter.window() if counter is not None else {}


class TopKState:
    """Top-K's settings and its error feedback: per bucket, what was left unsent last step."""

    def __init__(self, process_group, ratio: float) -> None:
        self.process_group, self.ratio = process_group, ratio
        self.residuals: dict[int, tuple[tuple[int, ...], Any]] = {}


def topk_hook(state: TopKState, bucket):
    """Top-K sparsified all-reduce of one DDP bucket, with error feedback.

    Each rank adds last step's residual to its gradient, keeps the ``ratio * numel`` entries of
    largest magnitude, and all-gathers them (values and indices, packed into one int32 tensor: 8
    bytes an entry); every rank then adds all ranks' entries into a zeroed buffer and divides by
    the world size, so the replicas stay identical. What a rank did not send stays in its residual
    and goes out in a later step (Stich et al. 2018, Lin et al. 2018), which keeps the sum of the
    updates unbiased. The residual is keyed by the bucket's parameters: DDP rebuilds its buckets
    after the first step, and a residual must never be added to another layout.
    """
    import torch
    import torch.distributed as dist

    group = state.process_group
    world_size = group.size()
    grad = bucket.buffer()
    layout = tuple(id(p) for p in bucket.parameters())
    held = state.residuals.get(bucket.index())
    if held is not None and held[0] == layout:
        grad.add_(held[1])
    numel = grad.numel()
    k = min(numel, max(1, math.ceil(state.ratio * numel)))
    _, indices = torch.topk(grad.abs(), k, sorted=False)
    values = grad[indices]
    residual = grad.clone()
    residual[indices] = 0
    state.residuals[bucket.index()] = (layout, residual)
    # A bucket is at most a few million entries (DDP's bucket_cap_mb), so int32 indices suffice.
    packed = torch.cat([values.float().view(torch.int32), indices.to(torch.int32)])
    gathered = [torch.empty_like(packed) for _ in range(world_size)]
    work = dist.all_gather(gathered, packed, group=group, async_op=True)

    def decompress(_fut):
        grad.zero_()
        for part in gathered:
            grad.index_add_(0, part[k:].long(), part[:k].view(torch.float32).to(grad.dtype))
        return grad.div_(world_size)

    return work.get_future().then(decompress)

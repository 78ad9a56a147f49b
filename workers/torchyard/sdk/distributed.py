"""Process group set-up, DDP wrapping with optional gradient compression, and a clean shutdown.

torch is imported inside the functions so that ``import torchyard.sdk`` stays cheap and torch-free.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import Any

from torchyard import protocol
from torchyard.sdk import context
from torchyard.sdk.compression import register as register_compression
from torchyard.sdk.config import job_config

# The lighthouse of an in_place job's ranks (sdk/resilient.py, which imports this module).
ENV_LIGHTHOUSE = "TORCHYARD_FT_LIGHTHOUSE"


def in_place() -> bool:
    """Whether this rank runs under `fault_tolerance.mode: in_place` (the warm launcher says so)."""
    return bool(os.environ.get(ENV_LIGHTHOUSE))


def planned_backend() -> str:
    """The planned backend (TORCHYARD_DIST_BACKEND), else nccl when CUDA is available, else gloo."""
    planned = os.environ.get(protocol.ENV_DIST_BACKEND, "").strip().lower()
    if planned and planned != "auto":
        return planned
    import torch

    return "nccl" if torch.cuda.is_available() else "gloo"


def init_process_group(backend: str | None = None, **kwargs: Any) -> bool:
    """Join the job's process group; returns False (and does nothing) for a single process.

    Uses torchrun's environment (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE). With nccl it also binds
    this process to the GPU of its local rank. Calling it twice is harmless.
    """
    if not context.is_distributed() or in_place():
        # fault_tolerance.mode in_place: the ranks average through torchft's own process groups
        # (sdk.resilient); the job's master port is its lighthouse's.
        return False
    import torch
    import torch.distributed as dist

    if dist.is_initialized():
        return True
    backend = backend or planned_backend()
    if backend == "nccl":
        torch.cuda.set_device(context.local_rank())
    dist.init_process_group(backend=backend, **kwargs)
    atexit.register(_release_at_exit)
    return True


def _release_at_exit() -> None:
    """Free the process group, and what holds it, while the interpreter can still run threads.

    An FSDP model, its device mesh and its process group sit in reference cycles; left to the
    interpreter's final collection, a gloo thread that needs the GIL to drop a tensor there can abort
    the process (SIGABRT, "terminate called without an active exception") after training ended
    well, which fails the node. atexit hooks run before finalization, when that is still safe.
    """
    _wait_for_checkpoints()
    if is_initialized():
        import torch.distributed as dist

        # Only gloo's destroy is purely local. NCCL's may wait on peers, which a rank leaving on an
        # exception must never do; its group is left to the collection below and to torch.
        if dist.get_backend() == "gloo":
            dist.destroy_process_group()
    gc.collect()


def device():
    """The device this rank should train on: its local GPU under nccl/CUDA, else the CPU."""
    import torch

    if torch.cuda.is_available() and planned_backend() == "nccl":
        return torch.device("cuda", context.local_rank())
    return torch.device("cpu")


def is_initialized() -> bool:
    """True when a process group is up (torch is only imported if it already was)."""
    dist = sys.modules.get("torch.distributed")
    return bool(dist is not None and dist.is_available() and dist.is_initialized())


def barrier() -> None:
    """Wait for every rank; a no-op without a process group."""
    if is_initialized():
        import torch.distributed as dist

        dist.barrier()


def shutdown_process_group() -> None:
    """Leave the process group cleanly: barrier, then destroy.

    Destroying right after the last step made a non-master rank abort at exit in about one run of
    three (FIELD-NOTES, torchrun); the barrier keeps every rank alive until all are done.
    """
    _wait_for_checkpoints()
    if is_initialized():
        import torch.distributed as dist

        _last_barrier_held(dist.barrier(async_op=True)).wait()
        dist.destroy_process_group()


# The work of the last barrier, kept alive until the process ends. gloo's worker thread drops its own
# reference to a work just after completing it, and when that reference is the last it must take the
# GIL to free the tensors the work holds (a barrier holds the works before it, DDP's broadcasts among
# them). Meanwhile the main thread, holding the GIL, may already be freeing the DDP model, whose
# process group's destructor joins that very thread: a deadlock, the rank printing its last line and
# never exiting (seen under CPU load: CI, and a loaded rerun of tests/integration/test_embedded_mode).
# Holding the work here makes the main thread, which has the GIL, the one that frees it.
_held_works: list[Any] = []


def _last_barrier_held(work: Any) -> Any:
    _held_works[:] = [work]
    return work


def _wait_for_checkpoints() -> None:
    """An async checkpoint save in flight commits on a process group of its own: destroying the
    groups under it would fail the save, so it ends first (only when the checkpoint module is in use)."""
    checkpoint = sys.modules.get("torchyard.sdk.checkpoint")
    if checkpoint is not None and hasattr(checkpoint, "wait"):
        checkpoint.wait()


def wrap_ddp(model, compression: dict[str, Any] | None = None, **ddp_kwargs: Any):
    """Wrap ``model`` in DistributedDataParallel, applying the job's gradient compression.

    ``compression`` defaults to the job config's ``compression`` section ({enabled, hook:
    none|fp16|bf16|powersgd|topk, and the hook's settings: see torchyard.sdk.compression}); the
    hook counts the bytes it sends, and ``sdk.comm_metrics(model)`` reads them for ``sdk.report``.
    Without a process group the model is returned unchanged, so single-process runs need no
    special case. Move the model to ``sdk.device()`` before wrapping.
    """
    if not is_initialized():
        if in_place() and context.is_distributed():
            raise RuntimeError("fault_tolerance.mode in_place: the job has no process group of its own; train "
                               "through sdk.resilient(model, optimizer), which averages the gradients over the "
                               "replicas (or submit with mode restart)")
        return model
    from torch.nn.parallel import DistributedDataParallel

    if "device_ids" not in ddp_kwargs and next(model.parameters()).device.type == "cuda":
        ddp_kwargs["device_ids"] = [context.local_rank()]
    ddp = DistributedDataParallel(model, **ddp_kwargs)
    settings = job_config()["compression"] if compression is None else compression
    register_compression(ddp, settings, warn=lambda message: print(f"[torchyard] warning: {message}", file=sys.stderr))
    return ddp


def unwrap(model):
    """The plain module inside a DDP wrapper (what to checkpoint), or ``model`` itself."""
    return getattr(model, "module", model)

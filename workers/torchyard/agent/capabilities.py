"""What this machine has (capabilities) and how busy it is (load), as the Machine model stores them.

The GPUs are NVML's, unless the agent declares them (`torchyard agent --gpus 0,1 --models
RTX3090,RTX3090 --memories 24576,24576`, the Go scheduler's worker): then only the listed indices are
scheduled, with the declared models and memory, and every difference from what NVML sees is a
warning the machine shows (`gpu_warnings`). Where NVML sees no GPU at all (no driver), the declared
GPUs are taken as declared: a CPU box can stand in for a GPU machine in tests and rehearsals.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from typing import TypedDict

import psutil

from torchyard.agent.volumes import report as volume_report
from torchyard.node.network import local_addresses
from torchyard.protocol import Capabilities, GpuInfo, Load


def _gpus() -> tuple[list[GpuInfo], list[float]]:
    """NVIDIA GPUs through NVML when a driver is there; none otherwise (this is not an error)."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return [], []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: the NVML library raises its own error types
        return [], []
    gpus: list[GpuInfo] = []
    usage: list[float] = []
    try:
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
            gpus.append({
                "index": index,
                "name": name.decode() if isinstance(name, bytes) else str(name),
                "memory_mb": int(memory.total // (1024 * 1024)),
            })
            usage.append(float(pynvml.nvmlDeviceGetUtilizationRates(handle).gpu))
    finally:
        pynvml.nvmlShutdown()
    return gpus, usage


class DeclaredGpus(TypedDict, total=False):
    """Under `--gpus`: that the GPUs reported are the declared ones, NVML's, and how they differ."""

    gpus_declared: bool
    gpus_detected: list[GpuInfo]
    gpu_warnings: list[str]


@dataclass(frozen=True)
class GpuDeclaration:
    """The agent's `--gpus`, `--models` and `--memories`: the GPU indices jobs may use (NVML's
    indices), and optionally their model names and memory in MB (else NVML's)."""

    indices: tuple[int, ...]
    models: tuple[str, ...] = ()
    memories: tuple[int, ...] = ()


def _items(flag: str, text: str) -> list[str]:
    items = [item.strip() for item in text.split(",")]
    if not all(items):
        raise ValueError(f"{flag} {text}: a comma-separated list with no empty item")
    return items


def parse_gpu_declaration(gpus: str | None, models: str | None = None,
                          memories: str | None = None) -> GpuDeclaration | None:
    """`--gpus 0,1 --models RTX3090,RTX3090 --memories 24576,24576` as a declaration (None when no
    flag is given). ValueError, naming the flag, for anything malformed."""
    if gpus is None:
        if models is not None or memories is not None:
            raise ValueError(f"{'--models' if models is not None else '--memories'} needs --gpus: the GPU indices "
                             "it describes, e.g. --gpus 0,1")
        return None
    indices = []
    for item in _items("--gpus", gpus):
        if not item.isdigit():
            raise ValueError(f"--gpus {gpus}: {item!r} is not a GPU index (0, 1, ... as nvidia-smi numbers them)")
        indices.append(int(item))
    if len(set(indices)) != len(indices):
        raise ValueError(f"--gpus {gpus}: a GPU is listed twice")
    names = _items("--models", models) if models is not None else []
    sizes = []
    for item in _items("--memories", memories) if memories is not None else []:
        if not item.isdigit() or int(item) == 0:
            raise ValueError(f"--memories {memories}: {item!r} is not a memory size in MB (24576 for 24 GB)")
        sizes.append(int(item))
    for flag, given in (("--models", names), ("--memories", sizes)):
        if given and len(given) != len(indices):
            raise ValueError(f"{flag}: {len(given)} given for {len(indices)} GPU(s) in --gpus {gpus}; give one per GPU")
    return GpuDeclaration(tuple(indices), tuple(names), tuple(sizes))


def check_declaration(declaration: GpuDeclaration, detected: list[GpuInfo] | None = None) -> None:
    """ValueError when the declaration names a GPU that NVML does not see (it would fail every job
    placed there); nothing to check when NVML sees no GPU at all."""
    detected = _gpus()[0] if detected is None else detected
    if not detected:
        return
    known = {g["index"] for g in detected}
    missing = [i for i in declaration.indices if i not in known]
    if missing:
        seen = ", ".join(f"{g['index']} ({g['name']}, {g['memory_mb']} MB)" for g in detected)
        raise ValueError(f"--gpus: this machine has no GPU {', '.join(map(str, missing))}; NVML sees {seen}")


def _same_model(declared: str, seen: str) -> bool:
    """RTX3090 is the NVIDIA GeForce RTX 3090 NVML names: compared without case, spaces or marks."""
    def squash(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())
    return squash(declared) in squash(seen)


def declared_gpus(declaration: GpuDeclaration, detected: list[GpuInfo]) -> tuple[list[GpuInfo], list[str]]:
    """The GPUs to schedule under the declaration, and how it differs from what NVML sees."""
    by_index = {g["index"]: g for g in detected}
    gpus: list[GpuInfo] = []
    warnings: list[str] = []
    if not detected:
        warnings.append(f"NVML sees no GPU here: GPU{'s' if len(declaration.indices) > 1 else ''} "
                        f"{', '.join(map(str, declaration.indices))} scheduled as declared")
    for position, index in enumerate(declaration.indices):
        seen = by_index.get(index)
        name = declaration.models[position] if declaration.models else seen["name"] if seen else "GPU"
        memory = declaration.memories[position] if declaration.memories else seen["memory_mb"] if seen else 0
        if detected and seen is None:
            warnings.append(f"GPU {index}: declared, but NVML does not see it; not scheduled")
            continue
        if seen is not None and declaration.models and not _same_model(name, seen["name"]):
            warnings.append(f"GPU {index}: declared {name}, NVML sees {seen['name']}")
        # NVML's total is a little under the marketed size on some cards: 1% is no mismatch.
        if seen is not None and declaration.memories and abs(memory - seen["memory_mb"]) > 0.01 * seen["memory_mb"]:
            warnings.append(f"GPU {index}: declared {memory} MB, NVML sees {seen['memory_mb']} MB")
        gpus.append({"index": index, "name": name, "memory_mb": memory})
    return gpus, warnings


def capabilities(work_dir: str, volumes: dict[str, str] | None = None,
                 declaration: GpuDeclaration | None = None) -> Capabilities:
    """`volumes`: the agent's declared volumes (name -> path, a path parsed from `--volume` carrying
    its storage class), reported with whether each exists, how full it is and its class
    (agent/volumes.py report). `declaration`: the agent's `--gpus`: the
    GPUs reported for scheduling are the declared ones, and NVML's (`gpus_detected`) and the
    differences (`gpu_warnings`) come with them."""
    detected, _ = _gpus()
    gpus, declared = detected, DeclaredGpus()
    if declaration is not None:
        gpus, warnings = declared_gpus(declaration, detected)
        declared = {"gpus_declared": True, "gpus_detected": detected, "gpu_warnings": warnings}
    return {
        "cpu_count": os.cpu_count() or 1,
        "memory": psutil.virtual_memory().total,
        "disk_space": shutil.disk_usage(work_dir).free,
        "gpu_count": len(gpus),
        "gpu_memory": sum(g["memory_mb"] for g in gpus),
        "gpus": gpus,
        **declared,
        "volumes": volume_report(volumes or {}),
        # The preflight measures what they carry between a job's machines (supervisor/links.py).
        "interfaces": [a.to_dict() for a in local_addresses()],
    }


def load(declaration: GpuDeclaration | None = None) -> Load:
    """`gpu_usage` by position in the reported GPUs: the declared ones (0 for one NVML does not see)."""
    detected, usage = _gpus()
    if declaration is not None:
        by_index = {g["index"]: percent for g, percent in zip(detected, usage, strict=False)}
        kept = [i for i in declaration.indices if not detected or i in by_index]
        usage = [by_index.get(i, 0.0) for i in kept]
    return {
        "cpu_usage": psutil.cpu_percent(interval=None),
        "memory_usage": psutil.virtual_memory().percent,
        "gpu_usage": usage,
    }

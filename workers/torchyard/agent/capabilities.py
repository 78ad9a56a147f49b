"""What this machine has (capabilities) and how busy it is (load), as the Machine model stores them."""

from __future__ import annotations

import os
import shutil
from typing import Any

import psutil

from torchyard.agent.volumes import report as volume_report


def _gpus() -> tuple[list[dict[str, Any]], list[float]]:
    """NVIDIA GPUs through NVML when a driver is there; none otherwise (this is not an error)."""
    try:
        import pynvml  # from nvidia-ml-py
    except ImportError:
        return [], []
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: the NVML library raises its own error types
        return [], []
    gpus, usage = [], []
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


def capabilities(work_dir: str, volumes: dict[str, str] | None = None) -> dict[str, Any]:
    """`volumes`: the agent's declared volumes (name -> path), reported with whether each exists
    and how full it is (supervisor/volumes.py report)."""
    gpus, _ = _gpus()
    return {
        "cpu_count": os.cpu_count() or 1,
        "memory": psutil.virtual_memory().total,
        "disk_space": shutil.disk_usage(work_dir).free,
        "gpu_count": len(gpus),
        "gpu_memory": sum(g["memory_mb"] for g in gpus),
        "gpus": gpus,
        "volumes": volume_report(volumes or {}),
    }


def load() -> dict[str, Any]:
    _, usage = _gpus()
    return {
        "cpu_usage": psutil.cpu_percent(interval=None),
        "memory_usage": psutil.virtual_memory().percent,
        "gpu_usage": usage,
    }

"""GPU use for a node's resource events: each of the node's GPUs, its utilization and memory, read
through NVML (nvidia-ml-py's ``pynvml``, as the agent reads capabilities) where the machine has it.

Where it has not (no package, no driver, no GPU) the events carry no GPU field at all, never a zero
that would read as an idle GPU; a GPU that NVML cannot read at the moment is left out the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from torchyard.stream_contract import GpuUse as GpuFigures


def node_gpus(env: Mapping[str, str]) -> list[int]:
    """The node's GPUs as the plan gave them: the NVML indices of its CUDA_VISIBLE_DEVICES."""
    return [int(item) for item in str(env.get("CUDA_VISIBLE_DEVICES", "")).split(",") if item.strip().isdigit()]


class GpuUse:
    """Samples the GPUs `indices` through NVML, which is started at the first sample and kept; when
    it cannot start, no sample is tried again (a driver does not appear under a running node)."""

    def __init__(self, indices: Iterable[int]) -> None:
        self.indices = list(indices)
        self._nvml: Any = None
        self._absent = not self.indices

    def _library(self) -> Any:
        if self._nvml is None and not self._absent:
            try:
                import pynvml

                pynvml.nvmlInit()
            except Exception:  # ImportError, or NVML's own errors: no driver, no GPU
                self._absent = True
                return None
            self._nvml = pynvml
        return self._nvml

    def sample(self) -> list[GpuFigures] | None:
        """[{index, utilization_percent, memory_used_mb, memory_total_mb}] of the GPUs NVML could
        read, or None (nothing to put in the event)."""
        nvml = self._library()
        if nvml is None:
            return None
        found: list[GpuFigures] = []
        for index in self.indices:
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                utilization = nvml.nvmlDeviceGetUtilizationRates(handle)
                memory = nvml.nvmlDeviceGetMemoryInfo(handle)
            except nvml.NVMLError:
                continue
            found.append({
                "index": index,
                "utilization_percent": float(utilization.gpu),
                "memory_used_mb": round(memory.used / 2**20, 1),
                "memory_total_mb": round(memory.total / 2**20, 1),
            })
        return found or None

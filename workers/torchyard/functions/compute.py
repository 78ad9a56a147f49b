"""What a function asks of the cluster: `Compute` (per node), `Volume`, and how they become the
JobSpec's sections. Plain values, checked when made, so a typo fails at the caller's line."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40, "PI": 2**50}
VOLUME_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")


def parse_size(value: int | float | str | None, what: str) -> int | None:
    """Bytes from 4096, "4Gi" (binary), "16GB" / "16G" (decimal), as Kubernetes quantities read."""
    if value is None:
        return None
    if isinstance(value, bool):
        raise ValueError(f"{what}: {value!r} is not a size")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"{what}: {value!r} is negative")
        return int(value)
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError(f"{what}: {value!r} is not a size such as 4Gi, 16GB or 4096")
    unit = (match.group(2) or "").upper().removesuffix("B")  # "GiB" and "Gi" alike, "B" alone is bytes
    return int(float(match.group(1)) * _UNITS[unit])


@dataclass(frozen=True)
class Volume:
    """A named host path that machines declare (`torchyard agent --volume NAME=PATH`): the job
    is placed only on machines that have it, and sees it at `mount_path` in its working directory
    (and as $TORCHYARD_VOLUME_<NAME>)."""

    name: str
    mount_path: str | None = None
    access_mode: str = "ReadWriteMany"

    def __post_init__(self) -> None:
        if not VOLUME_NAME.match(self.name):
            raise ValueError(f"volume name {self.name!r}: lower-case letters, digits, '.', '_' and '-' only")
        if self.access_mode not in ACCESS_MODES:
            raise ValueError(f"volume {self.name}: access_mode must be one of {', '.join(ACCESS_MODES)}")

    def to_spec(self) -> dict[str, Any]:
        spec: dict[str, Any] = {"name": self.name, "access_mode": self.access_mode}
        if self.mount_path:
            spec["mount_path"] = self.mount_path
        return spec


@dataclass(frozen=True)
class Compute:
    """What each node of a function's job needs (as `kt.Compute`): GPUs, CPU cores and memory on
    its machine (the planner skips machines without them, and says why), a minimum memory per GPU,
    machine labels to match, extra pip requirements, volumes and environment variables."""

    gpus: int = 0
    cpus: int | None = None
    memory: int | str | None = None
    min_gpu_memory: int | str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    requirements: list[str] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, int) or self.gpus < 0:
            raise ValueError(f"Compute(gpus={self.gpus!r}): a whole number of GPUs per node, 0 or more")
        if self.cpus is not None and (not isinstance(self.cpus, int) or self.cpus < 1):
            raise ValueError(f"Compute(cpus={self.cpus!r}): a whole number of cores per node, 1 or more")
        parse_size(self.memory, "Compute(memory)")
        parse_size(self.min_gpu_memory, "Compute(min_gpu_memory)")
        if isinstance(self.requirements, str):
            object.__setattr__(self, "requirements", [self.requirements])
        for volume in self.volumes:
            if not isinstance(volume, Volume):
                raise ValueError(f"Compute(volumes=...): {volume!r} is not a torchyard.Volume")

    def resources(self) -> dict[str, Any]:
        """The JobSpec `resources` entries this compute sets (nodes and processes come from distribute)."""
        out: dict[str, Any] = {"gpus_per_node": self.gpus}
        if self.cpus is not None:
            out["cpus_per_node"] = self.cpus
        memory = parse_size(self.memory, "memory")
        if memory:
            out["memory_per_node"] = memory
        gpu_memory = parse_size(self.min_gpu_memory, "min_gpu_memory")
        if gpu_memory:
            out["min_gpu_memory"] = max(1, gpu_memory // 2**20)  # the spec counts MB per GPU
        return out

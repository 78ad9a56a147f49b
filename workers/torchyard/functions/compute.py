"""What a function asks of the cluster: `Compute` (per node, and optionally how many nodes:
`Compute(...).distribute(...)`), `Volume`, and how they become the JobSpec's sections. Plain values,
checked when made, so a typo fails at the caller's line."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypedDict

from .images import Image, check_image

if TYPE_CHECKING:
    from torchyard.client.specfile import ResourcesAsk, VolumeAsk

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGTP]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "B": 1, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15,
          "KI": 2**10, "MI": 2**20, "GI": 2**30, "TI": 2**40, "PI": 2**50}
# Kubernetes CPU quantities: cores ("4", "1.5") or millicores ("4000m").
_CPUS = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(m?)\s*$")
VOLUME_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce")
# A framework's launcher; "ray": a Ray cluster on the job's nodes, the function its driver on the head.
FRAMEWORKS = {"pytorch": "torchrun", "python": "none", "ray": "ray"}
# distribute(worker_node_options=...): what each node of the cluster needs, as Compute's names.
NODE_OPTIONS = ("gpus", "cpus", "memory")


class NodeOptions(TypedDict, total=False):
    """distribute(worker_node_options=...): what each node of a Ray cluster needs, as Compute takes it."""

    gpus: int
    cpus: int | float | str
    memory: int | str


class FunctionError(ValueError):
    """The call cannot be made as asked (nothing was uploaded or submitted); the message says why."""


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


def parse_cpus(value: int | float | str | None) -> int | None:
    """Whole CPU cores from 4, 4.0, "4" or "4000m", as Kubernetes writes CPU quantities. A fraction
    of a core ("500m", 0.5, "1.5") is refused: Torchyard places whole cores (`cpus_per_node`)."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"Compute(cpus={value!r}): a number of CPU cores, such as 4 or \"4\"")
    if isinstance(value, str):
        match = _CPUS.match(value)
        if not match:
            raise ValueError(f"Compute(cpus={value!r}): a number of CPU cores, such as 4, \"4\" or \"4000m\"")
        cores = float(match.group(1)) / (1000 if match.group(2) else 1)
    else:
        cores = float(value)
    if not math.isfinite(cores):
        raise ValueError(f"Compute(cpus={value!r}): a number of CPU cores, such as 4 or \"4\"")
    if cores != int(cores):
        raise ValueError(f"Compute(cpus={value!r}): Torchyard places whole cores on a machine, not a share of one; "
                         f"ask for whole cores, e.g. cpus={max(1, round(cores))}")
    if cores < 1:
        raise ValueError(f"Compute(cpus={value!r}): a whole number of cores per node, 1 or more")
    return int(cores)


@dataclass(frozen=True)
class Volume:
    """A named host path that machines declare (`torchyard agent --volume NAME=PATH`): the job
    is placed only on machines that have it, and sees it at `mount_path` in its working directory
    (and as $TORCHYARD_VOLUME_<NAME>). Nothing is created or mounted: the volume is the machines'.

    As Kubetorch's `Volume(name, size, storage_class, mount_path, access_mode)`: `size` ("1Ti",
    bytes) is the free space the job needs on it, and machines whose volume has less free are
    skipped; `storage_class` ("juicefs-sc") places the job only where the agent declared the volume
    with that class (`torchyard agent --volume NAME=PATH,class=juicefs-sc`). A second argument
    that is not a size is read as `mount_path`, as Torchyard's `Volume(name, mount_path)` was."""

    name: str
    size: int | str | None = None
    storage_class: str | None = None
    mount_path: str | None = None
    access_mode: str = "ReadWriteMany"

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not VOLUME_NAME.match(self.name):
            raise ValueError(f"volume name {self.name!r}: lower-case letters, digits, '.', '_' and '-' only")
        if (isinstance(self.size, str) and self.mount_path is None and not _SIZE.match(self.size)
                and not self.size.strip()[:1].isdigit()):  # a mistyped size ("10 Gigs") still fails below
            object.__setattr__(self, "mount_path", self.size)  # Volume("data", "/data"): the older order
            object.__setattr__(self, "size", None)
        object.__setattr__(self, "size", parse_size(self.size, f"volume {self.name}: size"))
        if self.storage_class is not None and (not isinstance(self.storage_class, str)
                                               or not VOLUME_NAME.match(self.storage_class)):
            raise ValueError(f"volume {self.name}: storage_class {self.storage_class!r}: lower-case letters, digits, "
                             "'.', '_' and '-' only, as the agent declares it (--volume NAME=PATH,class=CLASS)")
        if self.access_mode not in ACCESS_MODES:
            raise ValueError(f"volume {self.name}: access_mode must be one of {', '.join(ACCESS_MODES)}")

    def to_spec(self) -> VolumeAsk:
        spec: VolumeAsk = {"name": self.name, "access_mode": self.access_mode}
        if self.mount_path:
            spec["mount_path"] = self.mount_path
        size = parse_size(self.size, f"volume {self.name}: size")  # bytes already (__post_init__)
        if size:
            spec["size"] = size
        if self.storage_class:
            spec["storage_class"] = self.storage_class
        return spec


@dataclass(frozen=True)
class Distribution:
    """How many nodes (`workers`, as Kubetorch counts them; a (MIN, MAX) pair for an elastic job)
    and processes per node, under which framework. Framework "ray" counts as Kubetorch does too:
    `workers` Ray worker nodes beside the head, so the job has workers + 1 nodes (0: a head alone)."""

    framework: str = "pytorch"
    workers: int | tuple[int, int] = 1
    nproc_per_node: int | None = None  # default: the node's GPUs, or 1 on CPU
    max_restarts: int | None = None
    worker_node_options: tuple[tuple[str, Any], ...] = ()  # framework ray: each node's gpus, cpus, memory

    def __post_init__(self) -> None:
        if self.framework not in FRAMEWORKS:
            raise FunctionError(f"framework {self.framework!r} is not supported; use one of: {', '.join(FRAMEWORKS)}")
        if isinstance(self.workers, list):
            object.__setattr__(self, "workers", tuple(self.workers))
        ray = self.framework == "ray"
        if isinstance(self.workers, tuple):
            if ray:
                raise FunctionError(f"workers={self.workers!r}: a Ray job has a fixed number of worker nodes, not a "
                                    "range (Torchyard grows an elastic job at a committed checkpoint, which a Ray "
                                    "driver does not make); give workers=N")
            if (len(self.workers) != 2 or not all(isinstance(n, int) and not isinstance(n, bool) for n in self.workers)
                    or not 1 <= self.workers[0] <= self.workers[1]):
                raise FunctionError(f"workers={self.workers!r}: an elastic range (MIN, MAX) of nodes, 1 <= MIN <= MAX")
        elif not isinstance(self.workers, int) or isinstance(self.workers, bool) or self.workers < (0 if ray else 1):
            raise FunctionError(
                f"workers={self.workers!r}: the number of Ray worker nodes beside the head, 0 or more" if ray else
                f"workers={self.workers!r}: the number of nodes, 1 or more, or a range (MIN, MAX)")
        if self.nproc_per_node is not None and (not isinstance(self.nproc_per_node, int) or self.nproc_per_node < 1):
            raise FunctionError(f"nproc_per_node={self.nproc_per_node!r}: processes per node, 1 or more")
        if self.framework in ("python", "ray") and self.nproc_per_node not in (None, 1):
            raise FunctionError(f"framework {self.framework!r} runs one process per node: nproc_per_node must be 1")
        unknown = sorted(k for k, _ in self.worker_node_options if k not in NODE_OPTIONS)
        if unknown:
            raise FunctionError(f"worker_node_options: unknown {', '.join(unknown)}; known: {', '.join(NODE_OPTIONS)}")
        Compute(**dict(self.worker_node_options))  # bad values fail at the caller's line

    @classmethod
    def of(cls, framework: str = "pytorch", workers: int | tuple[int, int] = 1, nproc_per_node: int | None = None,
           *, max_restarts: int | None = None, worker_node_options: NodeOptions | None = None) -> Distribution:
        """From `distribute`'s arguments (RemoteFunction.distribute, Compute.distribute, the decorator)."""
        options = tuple(sorted(worker_node_options.items() if worker_node_options else ()))
        return cls(framework, workers, nproc_per_node, max_restarts, options)

    @property
    def nodes(self) -> int | str:
        """The JobSpec's `resources.nodes`: "MIN:MAX" for an elastic range; framework ray's head included."""
        if isinstance(self.workers, tuple):
            return f"{self.workers[0]}:{self.workers[1]}"
        return self.workers + 1 if self.framework == "ray" else self.workers


@dataclass(frozen=True)
class Compute:
    """What each node of a function's job needs (as `kt.Compute`): GPUs, CPU cores and memory on
    its machine (the planner skips machines without them, and says why), a minimum memory per GPU,
    machine labels to match, extra pip requirements, volumes and environment variables.

    `cpus` is whole cores, as a number or as Kubernetes writes it (4, "4", "4000m"); a fraction of a
    core is refused. `image` describes the environment (`torchyard.images`): Torchyard runs no
    containers, a function runs on each machine's own Python, so an image adds pip requirements and
    environment variables to the job and a container image's name is refused.
    `Compute(...).distribute(framework, workers, ...)` carries a distribution that
    `torchyard.fn(f).to(compute)` takes."""

    gpus: int = 0
    cpus: int | float | str | None = None
    memory: int | str | None = None
    min_gpu_memory: int | str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    requirements: list[str] = field(default_factory=list)
    volumes: list[Volume] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    image: Image | None = None
    distribution: Distribution | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.gpus, int) or isinstance(self.gpus, bool) or self.gpus < 0:
            raise ValueError(f"Compute(gpus={self.gpus!r}): a whole number of GPUs per node, 0 or more")
        object.__setattr__(self, "cpus", parse_cpus(self.cpus))
        parse_size(self.memory, "Compute(memory)")
        parse_size(self.min_gpu_memory, "Compute(min_gpu_memory)")
        if isinstance(self.requirements, str):
            object.__setattr__(self, "requirements", [self.requirements])
        for volume in self.volumes:
            if not isinstance(volume, Volume):
                raise ValueError(f"Compute(volumes=...): {volume!r} is not a torchyard.Volume")
        check_image(self.image)
        if self.distribution is not None and not isinstance(self.distribution, Distribution):
            raise ValueError(f"Compute(distribution={self.distribution!r}): use Compute(...).distribute(...)")

    def distribute(self, framework: str = "pytorch", workers: int | tuple[int, int] = 1,
                   nproc_per_node: int | None = None, *, max_restarts: int | None = None,
                   worker_node_options: NodeOptions | None = None) -> Compute:
        """This compute over `workers` nodes (as `RemoteFunction.distribute` takes them): a new Compute
        that `torchyard.fn(f).to(compute)` runs distributed. A `.distribute(...)` on the function after
        `.to(compute)` wins."""
        return replace(self, distribution=Distribution.of(framework, workers, nproc_per_node, max_restarts=max_restarts,
                                                          worker_node_options=worker_node_options))

    def resources(self) -> ResourcesAsk:
        """The JobSpec `resources` entries this compute sets (nodes and processes come from distribute)."""
        out: ResourcesAsk = {"gpus_per_node": self.gpus}
        cpus = parse_cpus(self.cpus)  # whole cores already (__post_init__), as the spec counts them
        if cpus is not None:
            out["cpus_per_node"] = cpus
        memory = parse_size(self.memory, "memory")
        if memory:
            out["memory_per_node"] = memory
        gpu_memory = parse_size(self.min_gpu_memory, "min_gpu_memory")
        if gpu_memory:
            out["min_gpu_memory"] = max(1, gpu_memory // 2**20)  # the spec counts MB per GPU
        return out

    def pip(self) -> list[str]:
        """The job's `runtime.pip`: the image's packages, then the compute's own requirements (each once)."""
        packages = [*(self.image.pip if self.image else ()), *self.requirements]
        return list(dict.fromkeys(packages))

    def environment(self) -> dict[str, str]:
        """The job's `env`: the image's variables, the compute's own winning over them."""
        return {**(dict(self.image.env) if self.image else {}), **self.env}

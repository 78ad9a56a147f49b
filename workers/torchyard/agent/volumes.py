"""The volumes an agent declares (`torchyard agent --volume NAME=PATH[,class=CLASS]`) and what its
heartbeat says of them. The node side (links, environment, the preflight's proof of a shared
filesystem) is supervisor/volumes.py; this half is apart so the agent's capability report, which
the control plane also imports, pulls in nothing of the supervisor."""

from __future__ import annotations

import os
import re
import shutil

from torchyard import protocol
from torchyard.protocol import VolumeReport

NAME = re.compile(protocol.VOLUME_NAME_PATTERN)


class DeclaredPath(str):
    """A declared volume's path, with the storage class its declaration names (`,class=CLASS`, as a
    Kubernetes StorageClass names a kind of volume): still the plain path string, so the agent passes
    its declarations on as the name -> path mapping it always has."""

    storage_class: str | None

    def __new__(cls, path: str, storage_class: str | None = None) -> DeclaredPath:
        made = super().__new__(cls, path)
        made.storage_class = storage_class
        return made


def parse_declaration(text: str) -> tuple[str, DeclaredPath]:
    """`NAME=PATH` or `NAME=PATH,class=CLASS` as `torchyard agent --volume` takes it (CLASS: what a
    job's `Volume(storage_class=...)` asks for, e.g. juicefs-sc); raises ValueError saying what is wrong."""
    name, sep, rest = text.partition("=")
    if not sep or not NAME.match(name):
        raise ValueError(f"{text!r}: give NAME=PATH, NAME of lowercase letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit, 63 at most)")
    path, option, storage_class = rest.rpartition(",class=") if ",class=" in rest else (rest, "", "")
    if option and not NAME.match(storage_class):
        raise ValueError(f"{text!r}: give NAME=PATH,class=CLASS, CLASS of lowercase letters, digits, '.', '_' and '-'")
    if not os.path.isabs(path):
        raise ValueError(f"{text!r}: the path must be absolute")
    return name, DeclaredPath(os.path.normpath(path), storage_class or None)


def report(declared: dict[str, str]) -> list[VolumeReport]:
    """What an agent says of its declared volumes in its heartbeat: whether each path is a
    directory here, how big its filesystem is and how much is free (None when it does not exist),
    and the storage class its declaration names, when it names one."""
    found: list[VolumeReport] = []
    for name, path in sorted(declared.items()):
        exists = os.path.isdir(path)
        total = free = None
        if exists:
            try:
                usage = shutil.disk_usage(path)
            except OSError:
                exists = False
            else:
                total, free = usage.total, usage.free
        entry: VolumeReport = {"name": name, "path": str(path), "exists": exists, "total_bytes": total,
                                 "free_bytes": free}
        storage_class = getattr(path, "storage_class", None)
        if storage_class:
            entry["storage_class"] = storage_class
        found.append(entry)
    return found

"""The volumes an agent declares (`torchyard agent --volume NAME=PATH`) and what its heartbeat says
of them. The node side (links, environment, the preflight's proof of a shared filesystem) is
supervisor/volumes.py; this half is apart so the agent's capability report, which the control plane
also imports, pulls in nothing of the supervisor."""

from __future__ import annotations

import os
import re
import shutil
from typing import Any

from torchyard import protocol

NAME = re.compile(protocol.VOLUME_NAME_PATTERN)


def parse_declaration(text: str) -> tuple[str, str]:
    """`NAME=PATH` as `torchyard agent --volume` takes it; raises ValueError saying what is wrong."""
    name, sep, path = text.partition("=")
    if not sep or not NAME.match(name):
        raise ValueError(f"{text!r}: give NAME=PATH, NAME of lowercase letters, digits, '.', '_' and '-' "
                         "(starting with a letter or digit, 63 at most)")
    if not os.path.isabs(path):
        raise ValueError(f"{text!r}: the path must be absolute")
    return name, os.path.normpath(path)


def report(declared: dict[str, str]) -> list[dict[str, Any]]:
    """What an agent says of its declared volumes in its heartbeat: whether each path is a
    directory here, how big its filesystem is and how much is free (None when it does not exist)."""
    found = []
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
        found.append({"name": name, "path": path, "exists": exists, "total_bytes": total, "free_bytes": free})
    return found

"""A machine's volumes: the names jobs ask for (JobSpec `volumes`), each a host path.

Two sources: the operator's declaration on the server (`Machine.volumes`, `PATCH
/api/machines/{id}`) and the agent's own (`torchyard agent --volume NAME=PATH`), which its heartbeat
reports with whether the path exists and how full it is. Where both name one volume the agent's path
wins: it is the one the agent looked at on the machine itself. A volume only the server declares is
of unknown existence (null) until a node needs it; the node then fails before launch if it is not
there. selectors.machine_list_json writes the same merge in SQL."""

from __future__ import annotations

from typing import Any

from torchyard.protocol import VOLUME_NAME_PATTERN as NAME_PATTERN

__all__ = ["NAME_PATTERN", "merged_volumes"]


def merged_volumes(declared: dict[str, Any] | None, capabilities: dict[str, Any] | None) -> list[dict[str, Any]]:
    """[{name, path, source ("agent" or "server"), exists, total_bytes, free_bytes, storage_class}], by name
    (storage_class: the class the agent declares the volume with, `--volume NAME=PATH,class=CLASS`)."""
    reported: dict[str, dict[str, Any]] = {}
    for volume in (capabilities or {}).get("volumes") or []:
        if isinstance(volume, dict) and volume.get("name"):
            reported.setdefault(str(volume["name"]), volume)
    merged = []
    for name in sorted(set(declared or {}) | set(reported)):
        agent = reported.get(name)
        if agent is not None:  # the agent's path wins: it checked that one
            merged.append({"name": name, "path": str(agent.get("path") or ""), "source": "agent",
                           "exists": bool(agent.get("exists")), "total_bytes": agent.get("total_bytes"),
                           "free_bytes": agent.get("free_bytes"), "storage_class": agent.get("storage_class")})
        else:
            merged.append({"name": name, "path": str((declared or {})[name]), "source": "server",
                           "exists": None, "total_bytes": None, "free_bytes": None, "storage_class": None})
    return merged

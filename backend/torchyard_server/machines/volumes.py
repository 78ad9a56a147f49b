"""A machine's volumes: the names jobs ask for (JobSpec `volumes`), each a host path.

Two sources: the operator's declaration on the server (`Machine.volumes`, `PATCH
/api/machines/{id}`) and the agent's own (`torchyard agent --volume NAME=PATH`), which its heartbeat
reports with whether the path exists and how full it is. Where both name one volume the agent's path
wins: it is the one the agent looked at on the machine itself. A volume only the server declares is
of unknown existence (null) until a node needs it; the node then fails before launch if it is not
there. selectors.machine_list_json writes the same merge in SQL."""

from __future__ import annotations

from typing import Literal, TypedDict

from torchyard.protocol import VOLUME_NAME_PATTERN as NAME_PATTERN
from torchyard.protocol import Capabilities, VolumeReport

__all__ = ["NAME_PATTERN", "MachineVolume", "merged_volumes"]


class MachineVolume(TypedDict):
    """A volume of a machine, its two declarations merged (the API's MachineVolumeOut)."""

    name: str
    path: str
    source: Literal["agent", "server"]  # whose path it is: the agent's wins
    exists: bool | None  # null: only the server declares it, nobody looked
    total_bytes: int | None
    free_bytes: int | None
    storage_class: str | None  # the class the agent declares it with (`--volume NAME=PATH,class=CLASS`)


def merged_volumes(declared: dict[str, str] | None, capabilities: Capabilities | None) -> list[MachineVolume]:
    """Every volume of the machine, by name. Its capabilities are read defensively (an agent's
    heartbeat, as it sent it)."""
    reported: dict[str, VolumeReport] = {}
    for volume in (capabilities.get("volumes") if capabilities else None) or []:
        if isinstance(volume, dict) and volume.get("name"):
            reported.setdefault(str(volume["name"]), volume)
    merged: list[MachineVolume] = []
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

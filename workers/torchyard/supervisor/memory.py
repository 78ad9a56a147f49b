"""checkpointing.memory for the ranks: where this node's memory checkpoints go and, on a recovery from
one, where it is read from, as URLs on the network the job's preflight chose (supervisor/links.py),
so that the bytes take the link the job's own traffic takes; a holder with no address on it (or a
job that pinned no network) is reached at its registered host. Written into the ranks' config
(checkpointing.memory), which torchyard.sdk.checkpoint.memory reads."""

from __future__ import annotations

from typing import Any

from torchyard.protocol import MemoryHolder, NodeLaunch

from .links import address_on


def holder_url(holder: MemoryHolder, network: str) -> str:
    found = address_on(list(holder.get("addresses") or []), network) if network else None
    host = found["address"] if found else holder["host"]
    return f"http://{f'[{host}]' if ':' in host else host}:{int(holder['port'])}"


def ranks_config(launch: NodeLaunch, network: str) -> dict[str, Any]:
    """The ranks' config: the launch's, with checkpointing.memory's holders as URLs (unchanged when the
    job keeps no memory checkpoints). The key stays out of it: the ranks get it in their environment."""
    memory = launch.memory
    if not memory.get("key"):
        return launch.config

    def urls(holders: list[MemoryHolder]) -> list[dict[str, str]]:
        return [{"machine": h["machine"], "url": holder_url(h, network)} for h in holders]

    section: dict[str, Any] = {"every_n_steps": memory.get("every_n_steps"), "replicas": memory.get("replicas"),
                               "budget": memory.get("budget"), "holders": urls(list(memory.get("holders") or []))}
    resume = memory.get("resume")
    if resume:
        section["resume"] = {"manifest": resume["manifest"], "holders": urls(list(resume.get("holders") or []))}
    checkpointing = {**(launch.config.get("checkpointing") or {}), "memory": section}
    return {**launch.config, "checkpointing": checkpointing}

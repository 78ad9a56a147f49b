"""A node's peers file as tests of `sdk.peers` (and Kubetorch's `pod_ips`) write it: the membership
the agent writes into a node's run directory, and the environment its supervisor gives the node."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from torchyard import protocol
from torchyard.agent import runs


def membership(peers: list[dict[str, Any]], version: int, *statuses: str) -> dict[str, Any]:
    """The attempt's membership at `version`: node i of `peers` with `statuses[i]`."""
    return {"version": version, "nodes": [{**peer, "status": status}
                                          for peer, status in zip(peers, statuses, strict=False)]}


def as_node(root: Path, monkeypatch: pytest.MonkeyPatch, peers: list[dict[str, Any]], *, attempt: int) -> Path:
    """The environment of node 1 of job 7 in `attempt`, as its supervisor gives it, its run directory
    made under `root`; returns `root` (runs.write_peers's agent work dir)."""
    directory = runs.run_dir(root, 7, attempt, 1)
    directory.mkdir(parents=True)
    monkeypatch.setenv(protocol.ENV_RUN_DIR, str(directory))
    monkeypatch.setenv(protocol.ENV_NODE_RANK, "1")
    monkeypatch.setenv(protocol.ENV_PEERS, ",".join(peer["host"] for peer in peers))
    return root

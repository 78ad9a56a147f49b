"""The job's nodes as the machine side sees them: `peers(quorum, timeout)` (and Kubetorch's name for
it, `pod_ips(quorum_workers, quorum_timeout)`) and `on_membership_change`.

Works under any launcher, without torchrun and without DNS, and never talks to the server or Redis:
the controller sends every live node the membership of the attempt when a node starts running or
ends, its agent writes it into the node's run directory (`$TORCHYARD_RUN_DIR/peers.json`), and this
module reads that file. The addresses themselves are the plan's (`$TORCHYARD_PEERS`, node-rank order).
Off Torchyard (no `$TORCHYARD_RUN_DIR`) a script is one node: `peers()` is `[MASTER_ADDR or 127.0.0.1]`.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchyard import protocol

POLL_INTERVAL_S = 0.05
RUNNING = "running"
# A node that already exited 0 was up: a quick node may reach the quorum, return and finish before
# a slower one has looked, and the slower one must still count it (the answer is the same on every node).
UP = frozenset({RUNNING, "completed"})


class PeersTimeout(TimeoutError):
    """Fewer than `quorum` nodes of the job came up within the timeout; `missing` names the others."""

    def __init__(self, message: str, missing: list[protocol.MemberNode]) -> None:
        super().__init__(message)
        self.missing = missing


@dataclass(frozen=True)
class _View:
    version: int
    nodes: list[protocol.MemberNode]  # node-rank order


def _own_rank() -> int:
    for name in (protocol.ENV_NODE_RANK, protocol.ENV_NODE_RANK_PLAIN, "GROUP_RANK"):
        raw = os.environ.get(name, "").strip()
        if raw.isdigit():
            return int(raw)
    return 0


def _read(run_dir: Path) -> _View:
    """The membership as the newest peers.json says, else as the plan does (nobody known to be up)."""
    hosts = [h.strip() for h in os.environ.get(protocol.ENV_PEERS, "").split(",") if h.strip()]
    planned: list[protocol.MemberNode] = [{"node_rank": rank, "host": host, "machine": "", "status": ""}
                                          for rank, host in enumerate(hosts)]
    try:
        data = json.loads((run_dir / protocol.PEERS_FILE).read_text())
        nodes: list[protocol.MemberNode] = sorted((n.copy() for n in data["nodes"]), key=lambda n: int(n["node_rank"]))
        return _View(int(data.get("version") or 0), nodes)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return _View(-1, planned)


def _up(view: _View, own: int) -> list[protocol.MemberNode]:
    """The nodes that are up: running (or done with exit 0) as the controller last said, and this node itself."""
    return [n for n in view.nodes if n.get("status") in UP or int(n["node_rank"]) == own]


def _describe(node: protocol.MemberNode) -> str:
    where = node.get("machine") or node.get("host") or "?"
    status = f", {node['status']}" if node.get("status") else ""
    return f"node {node['node_rank']} ({where}{status})"


def peers(quorum: int | None = None, timeout: float = 60.0) -> list[str]:
    """The addresses of the job's nodes that are up, in node-rank order, once at least `quorum` of
    them (default: every node of the job) are; this node counts as up from the start.

    Raises PeersTimeout (a TimeoutError) naming the nodes still missing after `timeout` seconds, and
    ValueError for a quorum the job cannot reach.
    """
    raw_dir = os.environ.get(protocol.ENV_RUN_DIR, "").strip()
    if not raw_dir:
        return [os.environ.get("MASTER_ADDR") or "127.0.0.1"]
    run_dir, own = Path(raw_dir), _own_rank()
    deadline = time.monotonic() + max(0.0, timeout)
    while True:
        view = _read(run_dir)
        size = len(view.nodes) or 1
        wanted = size if quorum is None else quorum
        if not 1 <= wanted <= size:
            raise ValueError(f"quorum {quorum} is not between 1 and the job's {size} node(s)")
        up = _up(view, own)
        if len(up) >= wanted:
            return [str(n["host"]) for n in up]
        if time.monotonic() >= deadline:
            missing = [n for n in view.nodes if n not in up]
            raise PeersTimeout(
                f"{len(up)} of {size} node(s) up after {timeout:g} s, {wanted} wanted; missing: "
                + ", ".join(_describe(n) for n in missing), missing)
        time.sleep(POLL_INTERVAL_S)


def pod_ips(quorum_workers: int | None = None, quorum_timeout: float = 300.0) -> list[str]:
    """Kubetorch's `pod_ips`: the addresses of the job's nodes (its machines' addresses as the plan
    has them, in node-rank order; no pods, no DNS), once `quorum_workers` of them are up (default:
    every node of the job), waiting at most `quorum_timeout` seconds. `peers(quorum, timeout)` under
    Kubetorch's argument names. Raises PeersTimeout (a TimeoutError) naming the nodes still missing,
    and ValueError for a quorum larger than the job. Off Torchyard: `[MASTER_ADDR or 127.0.0.1]`."""
    return peers(quorum=quorum_workers, timeout=quorum_timeout)


def on_membership_change(callback: Callable[[list[protocol.MemberNode], list[protocol.MemberNode]], Any]) -> threading.Thread:
    """Call `callback(old_nodes, new_nodes)` whenever the job's membership changes (a node started
    running, or ended: failed, lost, stopped), from one daemon thread that polls the node's
    peers.json. Each node is {"node_rank", "host", "machine", "status"}. Off Torchyard nothing ever
    changes. Returns the thread; an exception in the callback is printed and the thread goes on."""
    raw_dir = os.environ.get(protocol.ENV_RUN_DIR, "").strip()

    def watch() -> None:
        if not raw_dir:
            return
        run_dir = Path(raw_dir)
        seen = _read(run_dir)
        while True:
            time.sleep(POLL_INTERVAL_S)
            view = _read(run_dir)
            if view.version <= seen.version:
                continue
            old, seen = seen, view
            try:
                callback(old.nodes, view.nodes)
            except Exception:  # a user's callback must not end the watch
                import traceback

                traceback.print_exc()

    thread = threading.Thread(target=watch, name="torchyard-membership", daemon=True)
    thread.start()
    return thread

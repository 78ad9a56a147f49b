"""Whether a node's ranks start warm (forked from its Python's pool, torchyard.warm) or cold (torchrun),
and the warm launcher's plan. The node's log says which, and why when cold."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypedDict

from torchyard.protocol import NodeLaunch
from torchyard.warm import pools
from torchyard.warm.run import WarmPlan

from .argv import TORCHRUN_LOG_DIR, rdzv_id
from .preflight import Versions

PLAN_FILE = "warm.json"
RUNNER_MODULE = "torchyard.warm.run"


def choose(launch: NodeLaunch, python: str, env: dict[str, str]) -> tuple[Path | None, str]:
    """(the pool's socket, "") when this node may start warm; (None, why not) otherwise. A job
    environment without a pool yet gets one asked of the agent, for the next launch."""
    if (launch.config.get("distributed") or {}).get("warm") is False:
        return None, "distributed.warm is false"
    if not launch.cache_dir:
        return None, "no machine cache (the node was not launched by an agent)"
    path = pools.socket_path(Path(launch.cache_dir), python)
    hello = pools.hello(path)
    if hello is None:
        pools.request_pool(Path(launch.cache_dir), python)
        return None, f"no warm pool of {python} on this machine yet (the agent starts one for the next launch)"
    if hello.get("python") != python:
        return None, f"the warm pool at {path} runs {hello.get('python')}, not {python}"
    reason = pools.cold_reason(env, hello.get("env") or {})
    return (None, reason) if reason else (path, "")


def pool_versions(socket: Path) -> Versions | None:
    """The Python and torch versions of a pool's interpreter as it says them itself (it imported
    torch): what preflight compares, without starting that Python once more to ask."""
    hello = pools.hello(socket)
    if hello is None or not hello.get("version") or "torch" not in (hello.get("versions") or {}):
        return None
    return Versions(python=str(hello["version"]), torch=str(hello["versions"]["torch"]))


def build_plan(launch: NodeLaunch, run_dir: Path, script: Path | None, *, socket: Path, python: str) -> WarmPlan:
    """What torchyard.warm.run needs: the pool, the node's share of the world, where the per-rank
    files go (as torchrun's --log-dir would lay them out), and the script or module with its args."""
    argv = [str(script) if script is not None else launch.module, *[str(a) for a in launch.args]]
    return {
        "socket": str(socket), "nproc": launch.nproc_per_node, "rank_start": launch.rank_start,
        "world_size": launch.world_size, "nnodes": launch.nnodes, "node_rank": launch.node_rank,
        "master_addr": launch.master_addr, "master_port": launch.master_port, "run_id": rdzv_id(launch),
        "log_dir": str(Path(run_dir) / TORCHRUN_LOG_DIR / f"{rdzv_id(launch)}_warm"),
        "argv": argv, "module": launch.module if script is None else "", "binary": python,
        **in_place(launch),
    }


def in_place(launch: NodeLaunch) -> InPlace:
    """fault_tolerance.mode in_place: the warm launcher replaces a dead rank (up to max_restarts times)
    instead of stopping the node. Only a warm start can: torchrun restarts every worker of a node."""
    tolerance = launch.config.get("fault_tolerance") or {}
    if tolerance.get("mode") != "in_place":
        return {}
    return {"in_place": True, "replacements": int(tolerance.get("max_restarts", 0))}


class InPlace(TypedDict, total=False):
    in_place: bool
    replacements: int


def launcher_argv(plan_file: Path) -> list[str]:
    # The agent's own Python: the launcher is standard library only and starts in milliseconds.
    return [sys.executable, "-m", RUNNER_MODULE, str(plan_file)]

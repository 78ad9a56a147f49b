"""`framework: ray` (distributed.launcher ray): the node runs a Ray head (node 0) or a Ray worker that
joins it, with the job's own Ray (its environment's, never the agent's), sized and ported by the plan.

The supervisor starts `python -m torchyard.ray_node PLAN_FILE` (ray_node.py) in the process group it
owns; that runner starts `ray start --block`, and on the head waits for every node, then runs the
user's driver with RAY_ADDRESS set. The builders here are pure; `pick_ports` and `ray_missing` look
at the machine.
"""

from __future__ import annotations

import hashlib
import os
import random
import shutil
import socket
from collections.abc import Mapping
from pathlib import Path

from torchyard.node.environments import lacks_module
from torchyard.protocol import NodeLaunch, RayPlan

LAUNCHER_RAY = "ray"
RAY_PLAN_FILE = "ray.json"
RUNNER_MODULE = "torchyard.ray_node"
# Ray puts Unix sockets at <temp>/session_<date>_<time>_<micros>_<pid>/sockets/plasma_store (about
# 65 bytes under the temp dir) and sun_path holds 107: the temp dir itself must stay short.
MAX_TEMP_DIR_BYTES = 36
SHORT_TEMP_ROOT = Path("/tmp")
MISSING_RAY = ("framework ray needs Ray in the job's environment, and it has none: add `ray` to the project's "
               "requirements.txt or to runtime.pip (e.g. \"ray==2.60.0\")")
# The ports every node's `ray start` takes (besides the head's GCS port, the plan's master port).
NODE_PORTS = ("node_manager", "object_manager", "dashboard_agent_listen", "dashboard_agent_grpc",
              "metrics_export", "runtime_env_agent")
# The Ray Client server is left out: it needs ray[client], and the driver runs on the head anyway.
HEAD_PORTS = ("dashboard",)
WORKER_PORT_COUNT = 64
PORT_RANGE = (10000, 32000)  # below Linux's ephemeral range (32768-60999): outgoing connections never take them
# Ray refuses an object store under 75 MiB.
MIN_OBJECT_STORE = 80 * 2**20
OBJECT_STORE_SHARE = 0.3
QUORUM_TIMEOUT_S = 300.0
ENV_QUORUM_TIMEOUT = "TORCHYARD_RAY_QUORUM_TIMEOUT_S"


class RayLaunchError(ValueError):
    """The node cannot start Ray as asked (retrying on the same machines would fail the same way)."""


def node_address(launch: NodeLaunch) -> str:
    """This node's own address as the plan gives it (the head's is the master address)."""
    if launch.node_rank == 0:
        return str(launch.master_addr)
    for peer in launch.peers:
        if int(peer.get("node_rank", -1)) == launch.node_rank and peer.get("host"):
            return str(peer["host"])
    return str(launch.master_addr) if launch.nnodes == 1 else ""


def temp_dir(launch: NodeLaunch, run_dir: Path) -> Path:
    """Ray's --temp-dir: RUN_DIR/ray when that is short enough for Ray's socket paths, else a short
    folder of this job, attempt and node under /tmp (removed when the node ends)."""
    preferred = Path(run_dir).resolve() / "ray"
    if len(os.fsencode(str(preferred))) <= MAX_TEMP_DIR_BYTES:
        return preferred
    digest = hashlib.sha256(os.fsencode(str(run_dir))).hexdigest()[:6]
    return SHORT_TEMP_ROOT / f"ray-{launch.job_id}-{launch.attempt}-{launch.node_rank}-{digest}"


def num_cpus(launch: NodeLaunch) -> int:
    """The node's CPUs as the plan gave them: resources.cpus_per_node, else one per process."""
    resources = launch.config.get("resources") or {}
    return int(resources.get("cpus_per_node") or launch.nproc_per_node or 1)


def num_gpus(launch: NodeLaunch) -> int:
    """The plan's GPUs of this node: the devices in its CUDA_VISIBLE_DEVICES."""
    visible = str(launch.env.get("CUDA_VISIBLE_DEVICES", "")).strip()
    return len([d for d in visible.split(",") if d.strip()]) if visible else 0


def object_store_bytes(available: int, shm_free: int | None = None) -> int:
    """30% of the machine's available memory (no more than /dev/shm holds), at least Ray's minimum."""
    size = int(available * OBJECT_STORE_SHARE)
    if shm_free:
        size = min(size, int(shm_free * 0.8))
    return max(MIN_OBJECT_STORE, size)


def _bindable(address: str, port: int) -> bool:
    with socket.socket(socket.AF_INET6 if ":" in address else socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((address, port))
        except OSError:
            return False
    return True


def pick_ports(address: str, head: bool, *, rng: random.Random | None = None) -> dict[str, int]:
    """Free ports on this node's address for every port `ray start` opens, and a free range of
    WORKER_PORT_COUNT for its worker processes ("min_worker"/"max_worker")."""
    rng = rng or random.Random()
    bind_to = address if address and address != "localhost" else "127.0.0.1"
    taken: set[int] = set()
    names = NODE_PORTS + (HEAD_PORTS if head else ())
    ports: dict[str, int] = {}
    for _ in range(2000):
        if len(ports) == len(names):
            break
        port = rng.randrange(*PORT_RANGE)
        if port not in taken and _bindable(bind_to, port):
            taken.add(port)
            ports[names[len(ports)]] = port
    for _ in range(200):
        base = rng.randrange(PORT_RANGE[0], PORT_RANGE[1] - WORKER_PORT_COUNT)
        span = range(base, base + WORKER_PORT_COUNT)
        if not taken.intersection(span) and all(_bindable(bind_to, p) for p in span):
            ports |= {"min_worker": base, "max_worker": base + WORKER_PORT_COUNT - 1}
            break
    missing = [n for n in (*names, "min_worker") if n not in ports]
    if missing:
        raise RayLaunchError(f"no free port on {bind_to} for Ray's {', '.join(missing)}")
    return ports


def build_ray_start_argv(launch: NodeLaunch, python: str, *, ports: Mapping[str, int], temp: Path,
                         object_store: int) -> list[str]:
    """`ray start --block` for this node: the head (node 0) with its GCS on the plan's master port and
    the dashboard on the head's own address, or a worker joining it. Every port is given."""
    address = node_address(launch)
    argv = [python, "-m", "ray.scripts.scripts", "start", "--block", "--disable-usage-stats",
            "--num-cpus", str(num_cpus(launch)), "--num-gpus", str(num_gpus(launch)),
            "--object-store-memory", str(object_store), "--temp-dir", str(temp)]
    if address:
        argv += ["--node-ip-address", address]
    if launch.node_rank == 0:
        # The dashboard starts where the environment has its packages (ray[default]), on the head's
        # own address only: Torchyard proxies it (GET /api/jobs/{id}/ray/) behind its sign-in.
        argv += ["--head", "--port", str(launch.master_port),
                 "--dashboard-host", address or "127.0.0.1", "--dashboard-port", str(ports["dashboard"])]
    else:
        argv += ["--address", head_address(launch)]
    for name in NODE_PORTS:
        argv += [f"--{name.replace('_', '-')}-port", str(ports[name])]
    argv += ["--min-worker-port", str(ports["min_worker"]), "--max-worker-port", str(ports["max_worker"])]
    return argv


def head_address(launch: NodeLaunch) -> str:
    """HOST:PORT of the head's GCS (RAY_ADDRESS of the driver, --address of the workers)."""
    return f"{launch.master_addr}:{launch.master_port}"


def quorum_timeout(environ: Mapping[str, str] | None = None) -> float:
    raw = (os.environ if environ is None else environ).get(ENV_QUORUM_TIMEOUT, "").strip()
    return float(raw) if raw else QUORUM_TIMEOUT_S


def build_plan(launch: NodeLaunch, python: str, driver: list[str] | None, *, ports: Mapping[str, int],
               temp: Path, object_store: int, timeout: float = QUORUM_TIMEOUT_S) -> RayPlan:
    """What ray_node.py reads (RUN_DIR/ray.json): the ray start argv, and on the head the driver's argv
    and how many nodes to wait for. `ports` etc. also go into the node's `running` event."""
    return {
        "head": launch.node_rank == 0,
        "address": head_address(launch),
        "nnodes": launch.nnodes,
        "quorum_timeout": timeout,
        "python": python,
        "ray_start": build_ray_start_argv(launch, python, ports=ports, temp=temp, object_store=object_store),
        "driver": driver if launch.node_rank == 0 else None,
        "temp_dir": str(temp),
    }


def ray_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment of every Ray process of the node: no usage reporting (no network here)."""
    return {**env, "RAY_USAGE_STATS_ENABLED": "0", "RAY_DISABLE_DOCKER_CPU_WARNING": "1"}


def ray_missing(python: str) -> bool:
    """True when the node's training Python cannot import ray."""
    return lacks_module(python, "ray")


def remove_temp_dir(temp: Path) -> None:
    """The node's Ray temp dir, when it is one of ours under /tmp (the run dir's goes with the run)."""
    if temp.parent == SHORT_TEMP_ROOT and temp.name.startswith("ray-"):
        shutil.rmtree(temp, ignore_errors=True)

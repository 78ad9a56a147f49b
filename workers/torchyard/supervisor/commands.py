"""What a node runs: torchrun, the warm launcher (ranks forked from a warm pool), Ray's node runner,
one plain Python process, or the job's command; with its environment and where its output goes.
Pure of process handling (ranks.py starts it)."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

from torchyard.bundles import size_text
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import RayNode

from . import accelerate_launch, ray_launch, warm_launch
from .argv import (
    LAUNCHER_ACCELERATE,
    LAUNCHER_COMMAND,
    LAUNCHER_NONE,
    LAUNCHER_TORCHRUN,
    TORCHRUN_LOG_FILE,
    EntrypointError,
    build_command_argv,
    build_env,
    build_launcher_env,
    build_plain_argv,
    build_torchrun_argv,
    plain_log_dir,
    runs_torchrun,
)
from .output_pump import OutputPump
from .states import write_json_atomic
from .volumes import volume_env

# What the node runs, as its reasons name it.
WHAT = {LAUNCHER_NONE: "python", LAUNCHER_COMMAND: "the command", ray_launch.LAUNCHER_RAY: "Ray",
        LAUNCHER_ACCELERATE: "accelerate"}


def what_runs(launch: NodeLaunch) -> str:
    return WHAT.get(launch.launcher, "torchrun")


@dataclass
class Command:
    argv: list[str]
    env: dict[str, str]
    stdout: Path
    # None: stderr goes with stdout (torchrun and the warm launcher write one log of their own).
    stderr: Path | None
    what: str
    ray: RayNode | None = None  # framework ray: the node's Ray processes (its `running` event)
    warm_pids_file: Path | None = None  # a warm start: where the launcher writes its ranks' pids
    ray_temp: Path | None = None  # framework ray: the node's --temp-dir, removed at the end

    @property
    def torchrun_like(self) -> bool:
        """torchrun or the warm launcher: one log of its own, the ranks' in per-rank files."""
        return self.stderr is None


def node_command(launch: NodeLaunch, run_dir: Path, workdir: Path, pump: OutputPump, *, python: str,
                 script: Path | None, warm_pool: Path | None, cold_because: str, function_env: dict[str, str],
                 interface_env: dict[str, str]) -> Command:
    """The node's command; its log says how it starts (warm or cold, and why)."""
    ray = launch.launcher == ray_launch.LAUNCHER_RAY
    env = build_launcher_env(launch, build_env(launch, run_dir, os.environ, workdir=workdir))
    env.update(function_env)
    if ray:
        env = ray_launch.ray_env(env)
    env.update(volume_env(launch.volumes))
    if interface_env:
        env.update(interface_env)
        pump.supervisor_line(f"ranks reach the master {launch.master_addr} through "
                             + ", ".join(f"{k}={v}" for k, v in sorted(interface_env.items())))
    if launch.launcher == LAUNCHER_TORCHRUN:
        log_file = run_dir / TORCHRUN_LOG_FILE
        if warm_pool is None:
            pump.supervisor_line(f"cold start (torchrun): {cold_because}")
            return Command(build_torchrun_argv(launch, run_dir, script, python=python), env, log_file, None, "torchrun")
        plan = warm_launch.build_plan(launch, run_dir, script, socket=warm_pool, python=python)
        plan_file = run_dir / warm_launch.PLAN_FILE
        write_json_atomic(plan_file, plan)
        pump.supervisor_line(f"warm start: {launch.nproc_per_node} rank(s) forked from the warm pool "
                             f"of {python} (torch already imported)")
        return Command(warm_launch.launcher_argv(plan_file), env, log_file, None, "the warm launcher",
                       warm_pids_file=Path(plan["log_dir"]) / "pids.json")
    if launch.launcher == LAUNCHER_ACCELERATE:
        if script is None:
            raise EntrypointError("launcher accelerate runs an entrypoint script through the plugin harness, not a module")
        env.update(accelerate_launch.accelerate_env(launch))
        argv = accelerate_launch.build_accelerate_argv(launch, run_dir, workdir, script, python=python)
        if runs_torchrun(launch):
            return Command(argv, env, run_dir / TORCHRUN_LOG_FILE, None, "accelerate")
        log_dir = plain_log_dir(run_dir, launch)
        log_dir.mkdir(parents=True, exist_ok=True)
        return Command(argv, env, log_dir / "stdout.log", log_dir / "stderr.log", "accelerate")
    # One process per node: its stdout and stderr go where torchrun would put local rank 0's, so
    # tailing, masking and the failure's last lines work as they do for torchrun.
    log_dir = plain_log_dir(run_dir, launch)
    log_dir.mkdir(parents=True, exist_ok=True)
    stdout, stderr = log_dir / "stdout.log", log_dir / "stderr.log"
    if ray:
        argv, info, temp = _ray_command(launch, run_dir, pump, python=python, script=script)
        return Command(argv, env, stdout, stderr, what_runs(launch), ray=info, ray_temp=temp)
    argv = (build_plain_argv(launch, script, python=python) if launch.launcher == LAUNCHER_NONE
            else build_command_argv(launch, python=python))
    return Command(argv, env, stdout, stderr, what_runs(launch))


def _ray_command(launch: NodeLaunch, run_dir: Path, pump: OutputPump, *, python: str,
                 script: Path | None) -> tuple[list[str], RayNode, Path]:
    """framework ray: the runner's argv (ray_node.py), with its plan written to RUN_DIR/ray.json, what
    the node's `running` event says of it (ports, temp dir, the dashboard on the head), its temp dir."""
    address = ray_launch.node_address(launch)
    ports = ray_launch.pick_ports(address, launch.node_rank == 0)
    temp = ray_launch.temp_dir(launch, run_dir)
    temp.mkdir(parents=True, exist_ok=True)
    shm_free = None
    with contextlib.suppress(OSError):
        shm_free = psutil.disk_usage("/dev/shm").free
    object_store = ray_launch.object_store_bytes(psutil.virtual_memory().available, shm_free)
    driver = build_plain_argv(launch, script, python=python) if launch.node_rank == 0 else None
    plan = ray_launch.build_plan(launch, python, driver, ports=ports, temp=temp, object_store=object_store,
                                 timeout=ray_launch.quorum_timeout())
    plan_file = run_dir / ray_launch.RAY_PLAN_FILE
    write_json_atomic(plan_file, plan)
    info: RayNode = {"head": launch.node_rank == 0, "address": address, "gcs": ray_launch.head_address(launch),
                            "ports": ports, "temp_dir": str(temp), "object_store_bytes": object_store,
                            "num_cpus": ray_launch.num_cpus(launch), "num_gpus": ray_launch.num_gpus(launch)}
    if launch.node_rank == 0:
        info["dashboard_port"] = ports["dashboard"]
    pump.supervisor_line(
        f"Ray {'head' if launch.node_rank == 0 else 'worker'} on {address}: {info['num_cpus']} CPU(s), "
        f"{info['num_gpus']} GPU(s), object store {size_text(object_store)}, ports "
        + ", ".join(f"{k}={v}" for k, v in ports.items()))
    return [python, "-m", ray_launch.RUNNER_MODULE, str(plan_file)], info, temp

"""`distributed.launcher: accelerate` (TransformerLab): each node runs HuggingFace Accelerate's launcher,
`accelerate launch --num_machines N --machine_rank R --main_process_ip IP --main_process_port P
--num_processes WORLD`, on the plugin harness (torchyard.harness), which runs the job's entrypoint as
`__main__` with an `accelerator` in it. Pure builders, as argv.py's: nothing here starts a process.

Accelerate has no `--multi_node` flag (the seed's command line predates that); several machines or
processes are its `--multi_gpu` mode, which runs torch's elastic launcher (torchrun) inside the
`accelerate` process. Torchyard gives that torchrun what it gives its own: static rendezvous on the
planned master (`--same_network`), no restarts of its own (the controller owns them), and per-rank
log files in the run directory, which the supervisor tails as it tails torchrun's. One process in
all is Accelerate's simple launcher: the harness as a plain child, its output in local rank 0's files.
"""

from __future__ import annotations

import json
from pathlib import Path

from torchyard.node.environments import lacks_module
from torchyard.protocol import NodeLaunch

from .argv import CONFIG_FILE, TORCHRUN_LOG_DIR, rdzv_id

HARNESS_MODULE = "torchyard.harness"
MISSING_ACCELERATE = ("launcher accelerate needs HuggingFace Accelerate in the job's Python: add `accelerate` "
                      "to the plugin's requirements.txt (or runtime.pip), or install it on the machine")


def accelerate_config(launch: NodeLaunch) -> dict[str, int | str]:
    """The harness's --accelerate_config: the node's place in the job (each rank adds its own rank)."""
    return {"world_size": launch.world_size, "num_machines": launch.nnodes, "machine_rank": launch.node_rank,
            "num_processes": launch.world_size, "nproc_per_node": launch.nproc_per_node,
            "main_process_ip": str(launch.master_addr), "main_process_port": int(launch.master_port)}


def build_accelerate_argv(launch: NodeLaunch, run_dir: Path, workdir: Path, script: Path, *, python: str) -> list[str]:
    """`python -m accelerate.commands.launch ... -m torchyard.harness ...` for one node: the node's
    training Python runs Accelerate's own CLI (`accelerate launch`), so the ranks get that Python."""
    argv = [python, "-m", "accelerate.commands.launch",
            "--num_machines", str(launch.nnodes), "--machine_rank", str(launch.node_rank),
            "--main_process_ip", str(launch.master_addr), "--main_process_port", str(launch.master_port),
            "--num_processes", str(launch.world_size),
            # Accelerate's defaults, given so that it does not print a warning into every job's log.
            "--mixed_precision", "no", "--dynamo_backend", "no"]
    if launch.world_size > 1:
        argv += ["--multi_gpu", "--same_network", "--max_restarts", "0", "--monitor_interval", "0.1",
                 "--log_dir", str(Path(run_dir) / TORCHRUN_LOG_DIR)]
    return [*argv, "-m", HARNESS_MODULE, "--plugin_dir", str(workdir), "--entrypoint", str(script),
            "--distributed_mode", "--accelerate_config", json.dumps(accelerate_config(launch), sort_keys=True),
            "--config_file", str(Path(run_dir) / CONFIG_FILE), *[str(arg) for arg in launch.args]]


def accelerate_env(launch: NodeLaunch) -> dict[str, str]:
    """What `accelerate launch` adds to the node's environment. Its torchrun takes every option from
    a PET_<NAME> variable too (torch.distributed.run documents them): `--redirects 3` (per-rank files,
    nothing on the console: Accelerate has no flag for it) and the run id that names the log folder."""
    env = {"PET_REDIRECTS": "3", "PET_RDZV_ID": rdzv_id(launch)}
    if launch.backend == "gloo":
        # Accelerate sets up gloo on the CPU only when told to; the harness's Accelerator and any the
        # plugin makes itself read this.
        env["ACCELERATE_USE_CPU"] = "true"
    return env


def accelerate_missing(python: str) -> bool:
    """True when the node's training Python cannot import accelerate."""
    return lacks_module(python, "accelerate")

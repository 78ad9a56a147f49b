"""Pure builders for the torchrun command line and the environment every launched process sees.

Nothing here starts a process; the supervisor calls these and the tests call them directly.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path

import torchyard
from torchyard import protocol
from torchyard.protocol import NodeLaunch

# Set on the supervisor process to run scripts from somewhere other than the installed package.
ENV_CODE_ROOT = "TORCHYARD_CODE_ROOT"

# Files and folders of one run directory (one node of one attempt).
LAUNCH_FILE = "launch.json"
PID_FILE = "supervisor.pid"
RESULT_FILE = "result.json"
CONFIG_FILE = "config.json"
TORCHRUN_LOG_FILE = "torchrun.log"  # torchrun's own stdout and stderr
TORCHRUN_LOG_DIR = "torchrun"  # per-rank files: <rdzv_id>_<rand>/attempt_0/<local_rank>/std{out,err}.log
SOCKET_FILE = "events.sock"
OUTPUT_DIR = "outputs"  # $TORCHYARD_OUTPUT_DIR: under the node's working directory

# sockaddr_un.sun_path holds 108 bytes including the terminating NUL; keep a margin.
MAX_SOCKET_PATH_BYTES = 100
SHORT_SOCKET_DIR = Path("/tmp")

# The folder that holds the torchyard package (site-packages when installed, workers/ in a checkout).
PACKAGE_PARENT = Path(torchyard.__file__).resolve().parent.parent
# Ranks import the SDK from RUN_DIR/pythonpath, which holds nothing but a link to the torchyard
# package: putting PACKAGE_PARENT itself on their path would shadow the training environment's own
# packages with the agent's (another Python's compiled modules, other versions).
SDK_PATH_DIR = "pythonpath"
# What a cold rank runs before its script or module (torchrun's own `-m`): torchyard/rank_main.py.
RANK_MAIN = ("-m", "torchyard.rank_main")


class EntrypointError(ValueError):
    """The launch names an entrypoint that may not or cannot be run."""


def default_code_root(environ: Mapping[str, str] | None = None) -> Path:
    """The code root: $TORCHYARD_CODE_ROOT when set, else the directory of the torchyard package."""
    environ = os.environ if environ is None else environ
    override = environ.get(ENV_CODE_ROOT, "").strip()
    return Path(override) if override else Path(torchyard.__file__).resolve().parent


def resolve_entrypoint(entrypoint: str, code_root: Path) -> Path:
    """Return the script `entrypoint` names under `code_root`, or raise EntrypointError saying why not.

    Refuses absolute paths, any ".." component, paths that resolve (through symlinks) outside the
    code root, and scripts that do not exist: a launch payload must not be able to run arbitrary files.
    """
    if not entrypoint or not entrypoint.strip():
        raise EntrypointError("entrypoint is empty")
    relative = Path(entrypoint)
    if relative.is_absolute():
        raise EntrypointError(f"entrypoint {entrypoint!r} is absolute; it must be relative to the code root")
    if ".." in relative.parts:
        raise EntrypointError(f"entrypoint {entrypoint!r} contains '..'; it must stay inside the code root")
    root = code_root.resolve()
    script = (root / relative).resolve()
    if not script.is_relative_to(root):
        raise EntrypointError(f"entrypoint {entrypoint!r} resolves outside the code root {root}")
    if not script.is_file():
        raise EntrypointError(f"entrypoint {entrypoint!r} does not exist under the code root {root}")
    return script


def sdk_path(run_dir: Path) -> Path:
    """The folder on the ranks' PYTHONPATH that makes `import torchyard` work, and nothing else."""
    return Path(run_dir) / SDK_PATH_DIR


def link_sdk(run_dir: Path, *, function: bool = False) -> Path:
    """Create sdk_path(run_dir) with its link to the installed torchyard package, and for a function
    job one to cloudpickle too (pure Python: it unpickles the function in any training Python)."""
    folder = sdk_path(run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    packages = [Path(torchyard.__file__).resolve().parent]
    if function:
        import cloudpickle

        packages.append(Path(cloudpickle.__file__).resolve().parent)
    for package in packages:
        link = folder / package.name
        if not link.is_symlink():
            link.symlink_to(package, target_is_directory=True)
    return folder


def event_socket_path(run_dir: Path) -> Path:
    """Where the SDK sends its datagrams: RUN_DIR/events.sock, or a short /tmp path when that is too long."""
    preferred = Path(run_dir) / SOCKET_FILE
    if len(os.fsencode(str(preferred))) <= MAX_SOCKET_PATH_BYTES:
        return preferred
    # Deterministic, so build_env stays pure and the supervisor finds the same path to bind and remove.
    digest = hashlib.sha256(os.fsencode(str(run_dir))).hexdigest()[:20]
    return SHORT_SOCKET_DIR / f"torchyard-{digest}.sock"


def rdzv_id(launch: NodeLaunch) -> str:
    """The torchrun run id: names the per-rank log folder and TORCHELASTIC_RUN_ID of every worker."""
    return f"torchyard-{launch.job_id}-{launch.attempt}"


def build_torchrun_argv(launch: NodeLaunch, run_dir: Path, script: Path | None, *, python: str | None = None) -> list[str]:
    """The torchrun argv for one node: an argument list for exec, never a shell string.

    `--max-restarts 0` because the controller owns restarts; `--redirects 3` with `--log-dir` gives
    per-rank stdout/stderr files the supervisor tails and tags with global ranks. With `script`
    None the launch's module runs, as `torchrun -m`. `python` is the interpreter of the ranks
    (the machine's training Python, or the job's prepared environment).
    """
    # Each rank runs the script through torchyard.rank_main (on the ranks' PYTHONPATH, sdk_path), which
    # ends it as a warm rank ends: without torch's process-group teardown, where it can hang or abort.
    target = [*RANK_MAIN, *(["-m", launch.module] if script is None else [str(script)])]
    return [
        python or sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes",
        str(launch.nnodes),
        "--nproc-per-node",
        str(launch.nproc_per_node),
        "--node-rank",
        str(launch.node_rank),
        "--master-addr",
        str(launch.master_addr),
        "--master-port",
        str(launch.master_port),
        "--rdzv-id",
        rdzv_id(launch),
        "--max-restarts",
        "0",
        # The default in torch 2.13 too; pinned because older releases polled every 5 s.
        "--monitor-interval",
        "0.1",
        "--log-dir",
        str(Path(run_dir) / TORCHRUN_LOG_DIR),
        "--redirects",
        "3",
        *target,
        *[str(arg) for arg in launch.args],
    ]


def build_env(launch: NodeLaunch, run_dir: Path, base_env: Mapping[str, str],
              workdir: Path | None = None) -> dict[str, str]:
    """The environment of torchrun and its workers: base_env, then launch.env and launch.secret_env,
    then Torchyard's own.

    Torchyard's variables win over the user's: the job/attempt/node-rank triple is how strays are
    found and killed, so a launch must not be able to mask it. `workdir` is where the ranks run
    (the copy of the job's bundle); it goes on PYTHONPATH so the project's own packages import
    from any script in it.
    """
    env = dict(base_env)
    env.update({str(k): str(v) for k, v in launch.env.items()})
    env.update({str(k): str(v) for k, v in launch.secret_env.items()})
    # A rank that dies of a signal (SIGSEGV, SIGABRT from C++) then prints every thread's Python
    # stack to its stderr, which the failure reason quotes. A launch may turn it off ("").
    env.setdefault("PYTHONFAULTHANDLER", "1")
    run_dir = Path(run_dir)
    env.update(
        {
            protocol.ENV_JOB_ID: str(launch.job_id),
            protocol.ENV_ATTEMPT: str(launch.attempt),
            protocol.ENV_NODE_RANK: str(launch.node_rank),
            protocol.ENV_RUN_DIR: str(run_dir.resolve()),
            protocol.ENV_EVENT_SOCKET: str(event_socket_path(run_dir)),
            protocol.ENV_CONFIG: str(run_dir / CONFIG_FILE),
            protocol.ENV_CHECKPOINT_URL: launch.checkpoint_url,
            protocol.ENV_RESUME_MANIFEST: launch.resume_manifest,
            # checkpointing.memory: what the agents holding the job's memory checkpoints ask for.
            protocol.ENV_MEMORY_KEY: str(launch.memory.get("key") or ""),
            # The ranks stat it (sdk.preemption_requested()); the agent writes it on a preemption.
            protocol.ENV_PREEMPT_FILE: str(run_dir.resolve() / protocol.PREEMPT_FILE),
            protocol.ENV_DIST_BACKEND: launch.backend,
            protocol.ENV_OUTPUT_DIR: str((Path(workdir) if workdir else run_dir) / OUTPUT_DIR),
            "PYTHONUNBUFFERED": "1",
        }
    )
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    sdk = str(sdk_path(run_dir))
    if sdk not in paths:
        paths.insert(0, sdk)
    if workdir is not None and Path(workdir) != run_dir and str(Path(workdir).resolve()) not in paths:
        paths.insert(0, str(Path(workdir).resolve()))
    env["PYTHONPATH"] = os.pathsep.join(paths)
    return env


# --- launchers other than torchrun (distributed.launcher: none, command) -------------------------
LAUNCHER_TORCHRUN = "torchrun"
LAUNCHER_NONE = "none"
LAUNCHER_COMMAND = "command"
LAUNCHER_ACCELERATE = "accelerate"  # accelerate_launch.py
# Where a plain process's (or a command's) stdout and stderr go: laid out as torchrun's --log-dir,
# local rank 0, so the same RankLogTailer reads them.
PLAIN_LOG_FOLDER = "attempt_0/0"
# The names a command may use in its argv; replaced as plain text, nothing else is expanded.
COMMAND_PLACEHOLDERS = ("NODE_RANK", "NNODES", "MASTER_ADDR", "MASTER_PORT", "NPROC_PER_NODE", "WORLD_SIZE")
PYTHON_NAMES = ("python", "python3")


def runs_torchrun(launch: NodeLaunch) -> bool:
    """Whether the node's launcher runs torchrun's elastic agent over procs_per_node ranks (accelerate
    does for more than one process in all): per-rank files, the ranks its children, its failure lines."""
    return launch.launcher == LAUNCHER_TORCHRUN or (launch.launcher == LAUNCHER_ACCELERATE and launch.world_size > 1)


def plain_log_dir(run_dir: Path, launch: NodeLaunch) -> Path:
    """The folder a plain process's stdout.log and stderr.log go to (under the torchrun log dir)."""
    return Path(run_dir) / TORCHRUN_LOG_DIR / f"{rdzv_id(launch)}_{launch.launcher}" / PLAIN_LOG_FOLDER


def build_plain_argv(launch: NodeLaunch, script: Path | None, python: str | None = None) -> list[str]:
    """`launcher: none` (and a Ray job's driver): the entrypoint script (or `-m module`) once per node,
    through rank_main as a torchrun rank runs it (a plain `python SCRIPT` as far as the script can
    tell), so that an exception it raises is reported the same way (rank_main.note_error)."""
    target = ["-m", launch.module] if script is None else [str(script)]
    return [python or sys.executable, *RANK_MAIN, *target, *[str(arg) for arg in launch.args]]


def command_values(launch: NodeLaunch) -> dict[str, str]:
    """What each ${NAME} of a command's argv stands for on this node."""
    return {
        "NODE_RANK": str(launch.node_rank),
        "NNODES": str(launch.nnodes),
        "MASTER_ADDR": str(launch.master_addr),
        "MASTER_PORT": str(launch.master_port),
        "NPROC_PER_NODE": str(launch.nproc_per_node),
        "WORLD_SIZE": str(launch.world_size),
    }


def build_command_argv(launch: NodeLaunch, python: str | None = None) -> list[str]:
    """`launcher: command`: the user's argv with the placeholders filled in, never through a shell.
    An argv[0] of python/python3 becomes the node's training Python (maybe the job's environment)."""
    if not launch.command:
        raise EntrypointError("launcher command needs distributed.command (an argv list)")
    values = command_values(launch)
    argv = []
    for item in launch.command:
        text = str(item)
        for name in COMMAND_PLACEHOLDERS:
            text = text.replace("${" + name + "}", values[name])
        argv.append(text)
    if argv[0] in PYTHON_NAMES:
        argv[0] = python or sys.executable
    return argv


def peers_env(launch: NodeLaunch) -> dict[str, str]:
    """What every launcher gives the job: the node's rank and count, the master, the peers' addresses
    in node-rank order (TORCHYARD_PEERS)."""
    hosts = [str(p.get("host", "")) for p in sorted(launch.peers, key=lambda p: int(p.get("node_rank", 0)))]
    return {
        protocol.ENV_NODE_RANK_PLAIN: str(launch.node_rank),
        protocol.ENV_NNODES: str(launch.nnodes),
        "MASTER_ADDR": str(launch.master_addr),
        "MASTER_PORT": str(launch.master_port),
        protocol.ENV_PEERS: ",".join(hosts) if hosts else str(launch.master_addr),
    }


def build_launcher_env(launch: NodeLaunch, env: Mapping[str, str]) -> dict[str, str]:
    """`env` (build_env's) plus the peers, and for none/command the rank variables a one-process
    node stands for: RANK = node rank, WORLD_SIZE = node count, LOCAL_RANK 0 (a command's own
    launcher sets its workers' over these)."""
    out = {**env, **peers_env(launch)}
    if not runs_torchrun(launch):
        out.update({"RANK": str(launch.node_rank), "WORLD_SIZE": str(launch.nnodes), "LOCAL_RANK": "0",
                    "LOCAL_WORLD_SIZE": "1"})
    return out

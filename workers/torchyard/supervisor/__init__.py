"""The node supervisor: `python -m torchyard.supervisor RUN_DIR` runs torchrun for one node.

Modules: argv (pure torchrun argv and environment builders), supervisor (state enum, result,
monitor loop), publisher (Redis event stream), tail (per-rank log files), event_socket (SDK
datagrams), proctree (finding and killing a job's processes; the agent reuses it).
"""

from .argv import EntrypointError, build_env, build_torchrun_argv, event_socket_path, resolve_entrypoint
from .proctree import find_job_processes, kill_process_tree, sweep_job_processes
from .supervisor import NodeSupervisor, SupervisorResult, SupervisorSettings, SupervisorState

__all__ = [
    "EntrypointError",
    "NodeSupervisor",
    "SupervisorResult",
    "SupervisorSettings",
    "SupervisorState",
    "build_env",
    "build_torchrun_argv",
    "event_socket_path",
    "find_job_processes",
    "kill_process_tree",
    "resolve_entrypoint",
    "sweep_job_processes",
]

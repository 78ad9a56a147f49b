"""The node supervisor: `python -m torchyard.supervisor RUN_DIR` runs torchrun for one node.

Modules: supervisor (the state machine and its monitor loop) composing its parts: preparation,
node_preflight, commands (what the node runs), ranks (its processes), output_pump (logs and SDK
events), wind_down; states (state enum, settings, result), argv (pure torchrun argv and
environment builders), publisher (Redis event stream), tail (per-rank log files), event_socket (SDK
datagrams). What it shares with the agent (finding and killing a job's processes, reading stacks,
the preemption request, the environments, the standby hand-over) is torchyard.node's, and the
bundle cache torchyard.bundles.cache's: the agent never imports the supervisor.
"""

from .argv import EntrypointError, build_env, build_torchrun_argv, event_socket_path, resolve_entrypoint
from .states import SupervisorResult, SupervisorSettings, SupervisorState
from .supervisor import NodeSupervisor

__all__ = [
    "EntrypointError",
    "NodeSupervisor",
    "SupervisorResult",
    "SupervisorSettings",
    "SupervisorState",
    "build_env",
    "build_torchrun_argv",
    "event_socket_path",
    "resolve_entrypoint",
]

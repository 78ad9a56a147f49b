"""Torchyard's training SDK: ``from torchyard import sdk``.

Imports with the standard library only; torch, boto3 and accelerate are imported when a function
needs them, so the control plane can import ``torchyard.sdk.scaling`` without paying for torch.
Off Torchyard (plain python, plain torchrun) every call behaves as a single process or plain
torchrun job would: ranks come from the environment, report() prints, checkpoints go to
./checkpoints (or TORCHYARD_CHECKPOINT_URL).
"""

from torchyard.sdk import checkpoint, compression, data, datasets, preemption
from torchyard.sdk.accelerate import get_accelerator
from torchyard.sdk.args import add_training_arguments
from torchyard.sdk.compression import metrics as comm_metrics
from torchyard.sdk.config import config, job_config
from torchyard.sdk.context import (
    attempt,
    is_distributed,
    is_distributed_training,
    is_main_process,
    job_id,
    local_rank,
    local_world_size,
    node_rank,
    print_distributed_info,
    rank,
    should_save_outputs,
    world_size,
)
from torchyard.sdk.data import GlobalSampler, shard
from torchyard.sdk.distributed import (
    barrier,
    device,
    init_process_group,
    is_initialized,
    planned_backend,
    shutdown_process_group,
    unwrap,
    wrap_ddp,
)
from torchyard.sdk.events import report, set_total_steps, total_steps
from torchyard.sdk.peers import PeersTimeout, on_membership_change, peers, pod_ips
from torchyard.sdk.preemption import preemption_requested, should_yield, yield_for_preemption
from torchyard.sdk.resilient import Resilient, resilient
from torchyard.sdk.scaling import adjust_hyperparameters

__all__ = [
    "GlobalSampler",
    "PeersTimeout",
    "Resilient",
    "add_training_arguments",
    "adjust_hyperparameters",
    "attempt",
    "barrier",
    "checkpoint",
    "comm_metrics",
    "compression",
    "config",
    "data",
    "datasets",
    "device",
    "get_accelerator",
    "init_process_group",
    "is_distributed",
    "is_distributed_training",
    "is_initialized",
    "is_main_process",
    "job_config",
    "job_id",
    "local_rank",
    "local_world_size",
    "node_rank",
    "on_membership_change",
    "peers",
    "planned_backend",
    "pod_ips",
    "preemption",
    "preemption_requested",
    "print_distributed_info",
    "rank",
    "report",
    "resilient",
    "set_total_steps",
    "shard",
    "should_yield",
    "should_save_outputs",
    "shutdown_process_group",
    "total_steps",
    "unwrap",
    "world_size",
    "wrap_ddp",
    "yield_for_preemption",
]

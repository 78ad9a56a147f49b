"""Where this process sits in the job: ranks and sizes, read from the environment.

torchrun sets RANK, WORLD_SIZE, LOCAL_RANK (and GROUP_RANK, its node rank); Torchyard adds
TORCHYARD_NODE_RANK. Outside any launcher every function answers as a single process would, so the
same script runs unchanged on a laptop. Torch is not imported here.
"""

from __future__ import annotations

import os
import sys

from torchyard import protocol


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from exc


def rank() -> int:
    """Global rank of this process (0 outside a distributed launch)."""
    return _env_int("RANK", 0)


def world_size() -> int:
    """Number of training processes in the job, over all nodes (1 outside a distributed launch)."""
    return max(1, _env_int("WORLD_SIZE", 1))


def local_rank() -> int:
    """Rank of this process on its own node; picks the GPU on multi-GPU nodes."""
    return _env_int("LOCAL_RANK", 0)


def local_world_size() -> int:
    """Number of training processes on this node."""
    return max(1, _env_int("LOCAL_WORLD_SIZE", 1))


def cpu_share(at_most: int) -> int:
    """How many threads this process may keep busy while its node's other ranks do the same work
    (a checkpoint's copy, hashing): its share of the node's CPUs, at least 1, at most ``at_most``."""
    return max(1, min(at_most, (os.cpu_count() or 1) // local_world_size()))


def node_rank() -> int:
    """Rank of this node in the job (Torchyard's, else torchrun's GROUP_RANK, else 0)."""
    return _env_int(protocol.ENV_NODE_RANK, _env_int("GROUP_RANK", 0))


def is_distributed() -> bool:
    """True when the job runs more than one training process."""
    return world_size() > 1


# The name DistroML's seed uses; same meaning.
is_distributed_training = is_distributed


def is_main_process() -> bool:
    """True on global rank 0, the one process that writes shared outputs."""
    return rank() == 0


def should_save_outputs() -> bool:
    """True where files meant to exist once per job (reports, exported models) should be written."""
    return is_main_process()


def job_id() -> str:
    """Torchyard job id, or "" outside Torchyard."""
    return os.environ.get(protocol.ENV_JOB_ID, "")


def attempt() -> int:
    """Attempt number of this job run (0 outside Torchyard)."""
    return _env_int(protocol.ENV_ATTEMPT, 0)


def print_distributed_info(file=None) -> None:
    """Print one line describing this process's place in the job (every rank prints its own)."""
    out = file or sys.stdout
    print(
        f"[torchyard] rank={rank()}/{world_size()} local_rank={local_rank()} node_rank={node_rank()} "
        f"job={job_id() or '-'} attempt={attempt()} "
        f"master={os.environ.get('MASTER_ADDR', '-')}:{os.environ.get('MASTER_PORT', '-')}",
        file=out,
        flush=True,
    )

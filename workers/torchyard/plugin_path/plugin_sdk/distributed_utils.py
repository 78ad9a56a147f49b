"""`plugin_sdk.distributed_utils`, as TransformerLab's plugins import it, answered by Torchyard's
plugin harness: whether the plugin runs distributed, the Accelerator the harness made, this
process's ranks, and whether it is the one that saves.

Standard library only: the harness imports torch and accelerate, this module never does. The
answers come from what the harness set up (torchyard/harness.py): DISTRIBUTED_TRAINING and
IS_MAIN_PROCESS (TransformerLab's names, set by the harness beside its own), the ranks torchrun or
`accelerate launch` gave the process, and `accelerator` in the plugin's `__main__`.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


def is_distributed_training() -> bool:
    """True when the harness runs the plugin with --distributed_mode."""
    return os.environ.get("DISTRIBUTED_TRAINING", "").lower() == "true"


def get_accelerator() -> Any | None:
    """The Accelerator the harness made for this process (None outside --distributed_mode)."""
    return getattr(sys.modules.get("__main__"), "accelerator", None)


def get_world_size() -> int:
    """How many processes the job has (1 when it is not distributed)."""
    return int(os.environ.get("WORLD_SIZE") or 1)


def get_rank() -> int:
    """This process's global rank (0 when it is not distributed)."""
    return int(os.environ.get("RANK") or 0)


def get_local_rank() -> int:
    """This process's rank on its machine."""
    return int(os.environ.get("LOCAL_RANK") or 0)


def is_main_process() -> bool:
    """True for global rank 0, the process whose outputs are the job's."""
    given = os.environ.get("IS_MAIN_PROCESS")
    return given.lower() == "true" if given else get_rank() == 0


def should_save_outputs() -> bool:
    """True where the plugin should write its outputs: the main process only (the harness gives
    every other rank a scratch output_dir of its own)."""
    return is_main_process()


def print_distributed_info() -> None:
    """The job's shape, printed once (by the main process)."""
    if is_main_process():
        print("Distributed Training Information:")
        print(f"  - World size: {get_world_size()}")
        print(f"  - Current rank: {get_rank()}")
        print(f"  - Local rank: {get_local_rank()}")
        print(f"  - Is main process: {is_main_process()}", flush=True)


def setup_distributed_logging(logger: logging.Logger) -> None:
    """Quiet `logger` below warnings on every process but the main one, so a message is logged once."""
    if not is_main_process():
        logger.setLevel(logging.WARNING)

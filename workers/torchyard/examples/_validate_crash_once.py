"""The training script `torchyard validate` uploads (as crash_once.py): Torchyard's built-in recipe
examples/mlp_ddp.py, unchanged, except that on the job's first attempt its last rank kills itself
with SIGKILL once, a moment after the first checkpoint committed.

The server has no API that kills a rank (nor should it), and validate may run far from the
agents, so the fault is injected from inside the job: a real kill -9 of a real rank, which the
control plane must notice, stop the other node, and relaunch both from the committed checkpoint.
The delay lets the checkpoint's commit reach the server before the failure does; without it the
job could rightly resume from an older one. Later attempts run the recipe as it is.

Runs on the job's nodes: the standard library and the installed torchyard package only.
"""

from __future__ import annotations

import os
import runpy
import signal
import sys
import threading
from pathlib import Path
from typing import Any

import torchyard
from torchyard import sdk

KILL_DELAY_S = 1.5
RECIPE = Path(torchyard.__file__).resolve().parent / "examples" / "mlp_ddp.py"
KILL_LINE = "validate: checkpoint committed; this rank kills itself with SIGKILL"  # validate reads it


def arm_the_kill() -> None:
    """Wrap sdk.checkpoint.save: after its first commit, SIGKILL this process KILL_DELAY_S later."""
    save = sdk.checkpoint.save

    def save_then_die(*args: Any, **kwargs: Any) -> Any:
        committed = save(*args, **kwargs)
        if committed is True:
            sdk.checkpoint.save = save  # once
            print(f"rank {sdk.rank()}: {KILL_LINE} in {KILL_DELAY_S} s", flush=True)
            timer = threading.Timer(KILL_DELAY_S, os.kill, (os.getpid(), signal.SIGKILL))
            timer.daemon = True  # a run that ends first is not killed on its way out
            timer.start()
        return committed

    sdk.checkpoint.save = save_then_die


if __name__ == "__main__":
    if sdk.attempt() == 0 and sdk.rank() == sdk.world_size() - 1:
        arm_the_kill()
    sys.argv = [str(RECIPE), *sys.argv[1:]]
    runpy.run_path(str(RECIPE), run_name="__main__")

"""The preemption request file: the agent asks a node to checkpoint and yield by writing
protocol.PREEMPT_FILE ({"grace", "reason", "at"}) into its run directory; the ranks read it through
the SDK (sdk/preemption.py) and the supervisor keeps time on it (supervisor/preemption.py).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from torchyard import protocol


def write_request(run_dir: Path, *, grace: float, reason: str) -> bool:
    """The agent's half: write the request atomically (the SDK may stat it any moment). False when
    one is there already (a redelivered task keeps the first request's clock)."""
    target = Path(run_dir) / protocol.PREEMPT_FILE
    if target.exists():
        return False
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"grace": grace, "reason": reason, "at": time.time()}))
    os.replace(tmp, target)
    return True

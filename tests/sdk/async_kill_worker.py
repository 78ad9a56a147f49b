"""Run under torchrun by test_checkpoint_crash.py: an async sharded save commits, then rank 1 stops
inside the next one (after writing its files, before the ranks agree) and is killed by the test.

Both ranks keep training (all_reduce on the default group) while the save is in flight; rank 1
then marks <out>/rank-1-trained. The pause hook writes rank 1's pid to <out>/paused.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torchyard import sdk
from torchyard.sdk import checkpoint


def main(out: Path) -> None:
    assert sdk.init_process_group()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))

    def state(step: int) -> dict:
        return {"w": distribute_tensor(torch.arange(8.0) + step, mesh, [Shard(0)])}

    assert checkpoint.save(state(1), 1, sharded=True, async_=True).result()

    os.environ["TORCHYARD_TEST_PAUSE_AFTER_WRITE"] = f"1:{out / 'paused'}"
    pending = checkpoint.save(state(2), 2, sharded=True, async_=True)
    total = torch.zeros(1)
    for _ in range(20):
        step_sum = torch.ones(1)
        dist.all_reduce(step_sum)  # the training loop's collectives, beside the save's own group
        total += step_sum
    assert total.item() == 20 * dist.get_world_size()
    (out / f"rank-{sdk.rank()}-trained").write_text("20 steps")
    print(f"rank {sdk.rank()}: step 2 committed: {pending.result()}", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

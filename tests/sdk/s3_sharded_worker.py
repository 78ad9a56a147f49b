"""Run by test_checkpoint_s3.py under torchrun: two ranks save a sharded DTensor to S3 and load it.

Each rank writes what it loaded to <out>/rank-<r>.json.
"""

from __future__ import annotations

import json
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
    saved = [
        checkpoint.save({"w": distribute_tensor(torch.arange(8.0) * step, mesh, [Shard(0)])}, step, sharded=True)
        for step in (1, 2)
    ]
    into = {"w": distribute_tensor(torch.zeros(8), mesh, [Shard(0)])}
    _, step, _ = checkpoint.load_latest(into=into)
    seen = {"saved": saved, "step": step, "local": into["w"].to_local().tolist()}
    (out / f"rank-{sdk.rank()}.json").write_text(json.dumps(seen))
    sdk.shutdown_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

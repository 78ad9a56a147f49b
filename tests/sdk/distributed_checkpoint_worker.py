"""Run by test_checkpoint_distributed.py under torchrun: saves and loads with a real process group.

Each rank writes what it saw to <out>/rank-<r>.json. With a second argument ``async``, every save
is an async one, waited for before the next step of the script.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Shard, distribute_tensor
from torchyard import sdk
from torchyard.sdk import checkpoint


def main(out: Path, mode: str) -> None:
    assert sdk.init_process_group()
    me = sdk.rank()
    seen: dict = {"rank": me, "world_size": dist.get_world_size()}

    def save(state, step: int, **options) -> bool:
        if mode == "sync":
            return checkpoint.save(state, step, **options)
        pending = checkpoint.save(state, step, async_=True, **options)
        assert isinstance(pending, checkpoint.PendingSave)
        # The loop owns its tensors again at once: what was saved is what save() was given.
        for value in state.values():
            if isinstance(value, torch.Tensor):
                value.add_(1000)
        return pending.result()

    # Replicated state: rank 0 writes; other ranks pass anything and still take part.
    seen["replicated_saved"] = save({"w": torch.full((4,), 1.0)}, 1)
    # Sharded state: a DTensor split over the ranks; each rank writes its own half through DCP.
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))

    def sharded_state(full: torch.Tensor, note: str) -> dict:
        return {"w": distribute_tensor(full, mesh, [Shard(0)]), "note": note}

    for step in (5, 10):
        seen[f"sharded_saved_{step}"] = save(
            sharded_state(torch.arange(8.0) + step, f"step {step}"), step, sharded=True
        )
    into = sharded_state(torch.zeros(8), "")
    state, step, manifest = checkpoint.load_latest(into=into)
    seen["first_load"] = {
        "step": step,
        "in_place": state is into,
        "local": state["w"].to_local().tolist(),
        "note": state["note"],
        "files": sorted(f["path"] for f in manifest["files"]),
    }

    # Rank 1's shard of the newest checkpoint goes bad: every rank must fall back together.
    dist.barrier()
    if me == 0:
        path = Path(checkpoint.checkpoint_url()) / "step-00000010" / "__1_0.distcp"
        data = bytearray(path.read_bytes())
        data[-64] ^= 0xFF
        path.write_bytes(bytes(data))
    dist.barrier()
    into = sharded_state(torch.zeros(8), "")
    state, step, _ = checkpoint.load_latest(into=into)
    seen["after_corruption"] = {"step": step, "local": state["w"].to_local().tolist(), "note": state["note"]}

    # Rank 1 on "another machine": the same path there is not rank 0's directory (no shared filesystem).
    shared = os.environ["TORCHYARD_CHECKPOINT_URL"]
    if me == 1:
        os.environ["TORCHYARD_CHECKPOINT_URL"] = str(out / "elsewhere")
    seen["unshared_store_saved"] = save(sharded_state(torch.zeros(8), ""), 15, sharded=True)
    os.environ["TORCHYARD_CHECKPOINT_URL"] = shared

    # A failure on one rank only (an unpicklable shard on rank 1) must fail the save on every rank.
    bad = {"fn": (lambda: None)} if me == 1 else {"ok": 1}
    seen["one_bad_rank_saved"] = save(bad, 20, sharded=True)

    # Gradient compression hooks from the job's "compression" section keep the replicas in step.
    for hook in ("fp16", "bf16", "powersgd"):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.Linear(16, 2))
        settings = {"start_iter": 2} if hook == "powersgd" else {}  # each hook takes only its own settings
        ddp = sdk.wrap_ddp(model, compression={"enabled": True, "hook": hook, **settings})
        for _ in range(4):  # PowerSGD starts compressing after start_iter plain steps
            ddp(torch.randn(8, 16) * (me + 1)).sum().backward()
        grads = [None, None]
        dist.all_gather_object(grads, model[0].weight.grad)
        seen[f"{hook}_grads_equal"] = bool(torch.equal(grads[0], grads[1]))

    (out / f"rank-{me}.json").write_text(json.dumps(seen))
    sdk.shutdown_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "sync")

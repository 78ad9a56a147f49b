"""mlp_ddp's model and data trained with FSDP2 (``fully_shard``): every rank holds a slice of the
weights and of the optimizer state, and checkpoints are sharded (torch.distributed.checkpoint).

A sharded checkpoint loads at any world size: a job saved by 2x2 processes resumes on 1x2 or in a
plain ``python mlp_fsdp.py``. Runs under plain python (no sharding: one process holds everything),
under torchrun and under Torchyard; gloo on CPU, NCCL on GPU. Same options and hyperparameters as
mlp_ddp.py, synthetic data only (epochs: passes over dataset_size samples, 10,000 unless given).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

try:
    from torchyard import sdk
except ImportError:  # a source checkout run as a plain file: workers/ holds the package
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
    from torchyard import sdk
import torch
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.checkpoint.stateful import Stateful
from torchyard import recipe_optimizer, recipe_params
from torchyard.examples.mlp_ddp import DEFAULTS, MLP, SyntheticData, parse_args, refused, train

RECIPE = "examples/mlp_fsdp.py"


class TrainState(Stateful):
    """Model and optimizer as torch.distributed.checkpoint sees them: sharded state dicts under
    FSDP, plain ones without it; loading writes straight into the live (sharded) tensors."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer) -> None:
        self.model, self.optimizer = model, optimizer

    def state_dict(self) -> dict[str, Any]:
        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state_dict["model"],
            optim_state_dict=state_dict["optimizer"],
        )


def shard_model(model: MLP, device: torch.device) -> None:
    """FSDP2 over all ranks: each Linear is its own unit, so only one layer is gathered at a time."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh(device.type, (sdk.world_size(),))
    for layer in model.net:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, datasets=("synthetic",))  # digits: mlp_ddp, whose checkpoints keep the sample position
    if refused(RECIPE, argv, args.dataset):
        return 2
    torch.set_num_threads(max(1, args.threads))  # see mlp_ddp.py
    distributed = sdk.init_process_group()
    rank, world = sdk.rank(), sdk.world_size()
    print(f"rank {rank}: starting ({world} processes, backend {sdk.planned_backend()}, FSDP)", flush=True)

    hp = sdk.config(DEFAULTS)
    device = sdk.device()
    torch.manual_seed(args.seed)  # identical initial weights everywhere before they are sharded
    model = MLP(int(hp["input_dim"]), int(hp["hidden"])).to(device)
    if distributed:
        shard_model(model, device)
    optimizer = recipe_optimizer.build_optimizer(model.parameters(), hp, default=recipe_params.DEFAULT_OPTIMIZER[RECIPE])
    # Endless batches, each (rank, step) its own; with an epoch declared (dataset_size, or epochs
    # asked for), samples by global position over that many, which every epoch sees again.
    epoch_size = recipe_params.synthetic_epoch(hp)
    sampler = sdk.GlobalSampler(epoch_size, batch_size=int(hp["batch_size"])) if epoch_size else None
    data = SyntheticData(int(hp["input_dim"]), int(hp["batch_size"]), args.seed, rank, device, sampler=sampler)
    args.steps = recipe_params.steps(hp, args.steps, epoch_size, int(hp["batch_size"]) * world)
    cadence = sdk.checkpoint.cadence(args.checkpoint_every)
    state = {"train": TrainState(model, optimizer)}

    start = 0
    resumed = sdk.checkpoint.load_latest(into=state)
    if resumed is not None:
        _, start, manifest = resumed
        print(f"rank {rank}: checkpoint saved by {manifest['world_size']} processes", flush=True)
        print(f"rank {rank}: resumed from checkpoint at step {start}", flush=True)
        if sampler is not None:
            # Sharded checkpoints keep no sample position: every step took one global batch (the
            # same at any world size under keep_global_batch).
            sampler.load_state_dict({"position": start * sampler.global_batch_size})
    print(f"rank {rank}: training steps {start + 1}..{args.steps}, checkpoint every {cadence.plan()}", flush=True)

    saved_at = train(
        args, model=model, optimizer=optimizer, data=data, start=start, cadence=cadence,
        checkpoint_state=lambda: state, recipe="mlp_fsdp", sharded=True,
        epoch=lambda: sampler.epoch if sampler is not None else None,
    )  # fmt: skip
    print(f"rank {rank}: done at step {max(start, args.steps)} (last checkpoint: {saved_at or '-'})", flush=True)
    sdk.shutdown_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""One rank of tests/sdk/test_compression_hooks.py, under torchrun (two processes, gloo).

For each hook the same small model learns the same teacher for STEPS steps; the rank records the
bytes its hook's counter saw each step, the losses, what sdk.comm_metrics() reports and whether the
replicas still agree. Then the Top-K hook's gradients are checked against a reference computed here
from the dense gradients of every rank (with the error feedback carried by hand).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torchyard import sdk
from torchyard.sdk.compression import COUNTER_ATTR

STEPS = 40
HOOKS = {
    "none": {},
    "fp16": {},
    "powersgd": {"rank": 1, "start_iter": 2},
    "topk": {"ratio": 0.05},
}


def small_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))


def train(hook: str, settings: dict, me: int) -> dict:
    model = small_model()
    ddp = sdk.wrap_ddp(model, compression={"enabled": True, "hook": hook, **settings})
    counter = getattr(ddp, COUNTER_ATTR)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    teacher = torch.Generator().manual_seed(1234)
    w1, w2 = torch.randn(32, 16, generator=teacher) / 32**0.5, torch.randn(16, 1, generator=teacher)
    data = torch.Generator()
    sent, losses = [], []
    for step in range(STEPS):
        x = torch.randn(32, 32, generator=data.manual_seed(1000 * step + me))
        loss = F.mse_loss(ddp(x), torch.tanh(x @ w1) @ w2)
        optimizer.zero_grad(set_to_none=True)
        before = counter.sent_bytes
        loss.backward()  # DDP waits for every bucket's future: the step's bytes are all counted
        sent.append(counter.sent_bytes - before)
        optimizer.step()
        losses.append(loss.item())
    params = torch.cat([p.detach().flatten() for p in model.parameters()])
    everyone = [torch.empty_like(params) for _ in range(dist.get_world_size())]
    dist.all_gather(everyone, params)
    return {
        "sent_per_step": sent, "losses": losses, "steps_counted": counter.steps,
        "grad_bytes": counter.grad_bytes, "reported": sdk.comm_metrics(ddp),
        "replicas_equal": all(torch.equal(everyone[0], other) for other in everyone[1:]),
        "shapes": [list(p.shape) for p in model.parameters()],
    }


def topk_matches_a_dense_reference(me: int, ratio: float = 0.25, steps: int = 3) -> bool:
    """The hook's averaged gradient equals the mean over ranks of each rank's top-k of (its gradient
    plus what it left unsent before), computed here from dense gradients; the weights stay put so
    every step's gradients are comparable."""
    torch.manual_seed(1)
    layer = nn.Linear(16, 8, bias=False)
    reference = copy.deepcopy(layer)
    ddp = sdk.wrap_ddp(layer, compression={"enabled": True, "hook": "topk", "ratio": ratio})
    k = int(ratio * layer.weight.numel())
    residual = torch.zeros(layer.weight.numel())
    agree = True
    for step in range(steps):
        x = torch.randn(4, 16, generator=torch.Generator().manual_seed(100 * step + me))
        reference.weight.grad = None
        reference(x).pow(2).sum().backward()
        owed = reference.weight.grad.flatten() + residual
        kept = owed.abs().topk(k).indices
        sparse = torch.zeros_like(owed)
        sparse[kept] = owed[kept]
        residual = owed - sparse
        every_rank = [torch.empty_like(sparse) for _ in range(dist.get_world_size())]
        dist.all_gather(every_rank, sparse)
        expected = torch.stack(every_rank).sum(0) / dist.get_world_size()
        layer.weight.grad = None
        ddp(x).pow(2).sum().backward()
        agree = agree and torch.allclose(layer.weight.grad.flatten(), expected, atol=1e-6)
    return agree


def main(out: Path) -> None:
    sdk.init_process_group(backend="gloo")
    me = sdk.rank()
    seen = {hook: train(hook, settings, me) for hook, settings in HOOKS.items()}
    seen["topk_matches_reference"] = topk_matches_a_dense_reference(me)
    (out / f"rank-{me}.json").write_text(json.dumps(seen))
    sdk.shutdown_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))

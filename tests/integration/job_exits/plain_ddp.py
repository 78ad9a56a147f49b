"""A plain DDP training script as people write them (no Torchyard SDK): DDP over gloo, a few dozen
steps, the group destroyed at the end, the model dropped as main() returns (torchyard/rank_main.py:
where torch's teardown deadlocks). `--hold-last-rank`: the last rank never ends its teardown; `--hold-every-rank`: none does;
`--raise-on-last-rank`: the last rank raises the same ValueError at step 20 on every attempt."""

import sys
import threading

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 1)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(40):
        if "--raise-on-last-rank" in sys.argv and rank == world - 1 and step == 20:
            raise ValueError("a batch this script cannot take")
        loss = model(torch.randn(16, 32)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank} done: loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()
    if "--hold-every-rank" in sys.argv or ("--hold-last-rank" in sys.argv and rank == world - 1):
        # A teardown that never ends: a non-daemon thread nobody stops, which the interpreter joins at exit.
        threading.Thread(target=threading.Event().wait, name="never-ends").start()


if __name__ == "__main__":
    main()

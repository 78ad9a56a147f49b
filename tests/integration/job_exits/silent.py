"""Blocks without a word on the first attempt: rank 0 waits on nothing, the others in a barrier for
it. The next attempt meets and ends."""

import os
import threading

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if os.environ["TORCHYARD_ATTEMPT"] == "0":
    if dist.get_rank() == 0:
        threading.Event().wait()
    dist.barrier()
total = torch.ones(1)
dist.all_reduce(total)
print(f"rank {dist.get_rank()}: all {int(total.item())} ranks met", flush=True)
dist.barrier()
dist.destroy_process_group()

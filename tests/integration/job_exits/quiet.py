"""Quiet on purpose, each part longer than its stall timeout: rank 0 computes without a word while
the others wait for it in a barrier (silent, but on a busy peer), then every rank sleeps."""

import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 0:
    started = time.monotonic()
    x = torch.randn(128, 128)
    while time.monotonic() - started < 8:
        x = torch.tanh(x @ x / 128)
dist.barrier()
time.sleep(8)
print("quietly done", flush=True)
dist.barrier()
dist.destroy_process_group()

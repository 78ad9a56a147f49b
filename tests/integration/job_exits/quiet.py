"""Quiet on purpose: computes without a word, then sleeps, each for longer than its stall timeout."""

import time

import torch

started = time.monotonic()
x = torch.randn(128, 128)
while time.monotonic() - started < 8:
    x = torch.tanh(x @ x / 128)
time.sleep(8)
print("quietly done", flush=True)

"""sdk.resilient on its own: two real ranks under fault_tolerance.mode in_place (torchft replicas, a real
lighthouse), without the stack. They train to the same weights as each other; and a preemption request
that only one of them sees is agreed on by both at the same step (no process group of the job to
agree through: the replicas sum a flag through torchft), so they save and yield together."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torchft")
WORKERS = Path(__file__).resolve().parents[2] / "workers"

SCRIPT = """\
import sys, torch
from torchyard import sdk
torch.manual_seed(0)
model = torch.nn.Linear(4, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
run = sdk.resilient(model, optimizer)
for step in run.steps(200):
    run.optimizer.zero_grad()
    g = torch.Generator().manual_seed(step * 10 + sdk.rank())
    x = torch.randn(8, 4, generator=g)
    loss = (run.model(x) - x.sum(1, keepdim=True)).pow(2).mean()
    loss.backward()
    run.optimizer.step()
    if not run.committed(step):
        continue
    if step >= 20 and sdk.should_yield():
        print("YIELD", step, round(float(model.weight.sum()), 6), flush=True)
        sys.exit(0)
print("DONE", flush=True)
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_two_replicas_agree_on_a_preemption_only_one_saw_and_hold_the_same_weights(tmp_path):
    port = free_port()
    (tmp_path / "train.py").write_text(SCRIPT)
    requested = tmp_path / "preempt-requested"
    requested.write_text('{"grace": 60, "reason": "test"}')
    base = {k: v for k, v in os.environ.items() if not k.startswith("TORCHYARD_")} | {
        "PYTHONPATH": str(WORKERS), "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "WORLD_SIZE": "2",
        "TORCHYARD_FT_LIGHTHOUSE": f"http://127.0.0.1:{port}", "RUST_LOG": "warn", "OMP_NUM_THREADS": "1"}
    lighthouse = subprocess.Popen([sys.executable, "-m", "torchyard.warm.lighthouse", f"127.0.0.1:{port}", "2"],
                                  env=base, stderr=subprocess.PIPE)
    ranks = []
    try:
        for rank in (0, 1):
            # Only rank 0's node was asked to yield.
            preempt = str(requested) if rank == 0 else str(tmp_path / "never-written")
            ranks.append(subprocess.Popen(
                [sys.executable, str(tmp_path / "train.py")], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                text=True, env=base | {"RANK": str(rank), "LOCAL_RANK": "0", "TORCHYARD_PREEMPT_FILE": preempt}))
        outputs = [proc.communicate(timeout=120)[0] for proc in ranks]
    finally:
        for proc in [*ranks, lighthouse]:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    said = [[line for line in out.splitlines() if line.startswith(("YIELD", "DONE"))] for out in outputs]
    assert all(len(lines) == 1 for lines in said), outputs
    assert said[0] == said[1] and said[0][0].startswith("YIELD 20 "), said


def test_under_in_place_wrap_ddp_says_to_train_through_resilient(monkeypatch):
    """No process group of the job exists under in_place: DDP on it would train each rank alone, silently."""
    import torch
    from torchyard import sdk

    monkeypatch.setenv("TORCHYARD_FT_LIGHTHOUSE", "http://127.0.0.1:1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert sdk.init_process_group() is False
    with pytest.raises(RuntimeError, match=r"train through sdk.resilient\(model, optimizer\)"):
        sdk.wrap_ddp(torch.nn.Linear(2, 1))

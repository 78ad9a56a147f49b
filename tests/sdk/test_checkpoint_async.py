"""Async saves: what returns at once, what waits, and what the training loop may do meanwhile.

(The commit protocol, fallback and crash tests run async too: test_checkpoint_local.py,
test_checkpoint_crash.py, test_checkpoint_distributed.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from torchyard.sdk import checkpoint
from torchyard.sdk.checkpoint.staging import Stager

WORKERS = Path(__file__).resolve().parents[2] / "workers"
PAUSE = "TORCHYARD_TEST_PAUSE_BEFORE_COMMIT"


@pytest.fixture(autouse=True)
def nothing_left_in_flight():
    yield
    checkpoint.wait()


def wait_for(path: Path, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def test_the_loop_may_change_its_tensors_as_soon_as_save_returns(tmp_path):
    weights = torch.arange(1 << 20, dtype=torch.float32)
    state = {"model": {"w": weights, "tied": weights}, "steps": [1, 2], "name": "mlp"}
    pending = checkpoint.save(state, 5, async_=True)
    weights.mul_(-1)  # the next optimizer step, in place
    state["steps"].append(3)
    state["name"] = "changed"

    assert pending.result(timeout=60) is True and pending.step == 5
    assert pending.blocking_seconds >= 0 and pending.background_seconds > 0
    loaded, step, manifest = checkpoint.load_latest()
    assert step == 5 and loaded["steps"] == [1, 2] and loaded["name"] == "mlp"
    assert torch.equal(loaded["model"]["w"], torch.arange(1 << 20, dtype=torch.float32))
    assert loaded["model"]["tied"] is loaded["model"]["w"]  # tied weights stay one tensor
    assert manifest["save"]["async"] is True
    assert manifest["save"]["blocking_seconds"] == round(pending.blocking_seconds, 3)


def test_a_second_async_save_waits_for_the_first_and_says_so(tmp_path, monkeypatch, capfd):
    marker = tmp_path / "paused"
    monkeypatch.setenv(PAUSE, str(marker))
    first = checkpoint.save({"w": torch.ones(4)}, 1, async_=True)
    wait_for(marker)  # the first is in flight, held just before its commit
    monkeypatch.delenv(PAUSE)
    assert not first.done()
    threading.Timer(0.5, marker.unlink).start()

    started = time.monotonic()
    second = checkpoint.save({"w": torch.zeros(4)}, 2, async_=True)
    waited = time.monotonic() - started

    assert first.done() and first.result() is True  # committed before the second started
    assert waited >= 0.4 and second.blocking_seconds >= 0.4
    assert second.result(timeout=60) is True
    err = capfd.readouterr().err
    assert "checkpoint at step 2 waited" in err and "for the checkpoint at step 1 to finish" in err
    root = tmp_path / "checkpoints"
    assert json.loads((root / "step-00000002" / "manifest.json").read_text())["save"]["blocking_seconds"] >= 0.4


def test_a_synchronous_save_and_a_load_wait_for_the_save_in_flight(tmp_path, monkeypatch, capfd):
    marker = tmp_path / "paused"
    monkeypatch.setenv(PAUSE, str(marker))
    pending = checkpoint.save({"w": torch.ones(4)}, 1, async_=True)
    wait_for(marker)
    monkeypatch.delenv(PAUSE)
    threading.Timer(0.3, marker.unlink).start()

    _, step, _ = checkpoint.load_latest()
    assert step == 1 and pending.done()
    assert "load_latest waited" in capfd.readouterr().err
    assert checkpoint.save({"w": torch.ones(4)}, 2) is True
    assert checkpoint.wait() is True  # the latest async save, long committed


def test_wait_returns_whether_the_latest_async_save_committed(tmp_path, monkeypatch, capfd):
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(tmp_path / "file" / "under-a-file"))
    (tmp_path / "file").write_text("not a directory")
    checkpoint.save({"w": torch.ones(4)}, 1, async_=True)
    assert checkpoint.wait() is False
    assert checkpoint.wait() is False  # still the latest one, however often it is asked
    assert "checkpoint at step 1 not saved" in capfd.readouterr().err


EXITER = """
import torch
from torchyard.sdk import checkpoint
checkpoint.save({"w": torch.ones(1000)}, 3, async_=True)
print("main done", flush=True)
"""


def test_the_process_waits_at_exit_for_its_save_in_flight(tmp_path):
    marker, root, out = tmp_path / "paused", tmp_path / "checkpoints", tmp_path / "out.txt"
    env = {
        **os.environ, PAUSE: str(marker), "PYTHONPATH": str(WORKERS), "TORCHYARD_CHECKPOINT_URL": str(root),
    }  # fmt: skip
    with open(out, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-c", EXITER], env=env, stdout=fh, stderr=subprocess.STDOUT)
    try:
        wait_for(marker)
        deadline = time.monotonic() + 30
        while "main done" not in out.read_text():
            assert time.monotonic() < deadline
            time.sleep(0.02)
        time.sleep(0.3)
        assert proc.poll() is None, "the process exited with its save in flight"
        assert not (root / "step-00000003" / "manifest.json").exists()
        marker.unlink()  # let the commit go on
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert (root / "step-00000003" / "manifest.json").is_file()
    assert "waiting for the checkpoint at step 3 to commit before exiting" in out.read_text()


def test_the_stager_reuses_its_buffers_for_the_same_shapes():
    stager = Stager()
    state = {"a": torch.ones(1000), "b": [torch.zeros(10), 7]}
    first = stager.stage(state)
    pointers = (first["a"].data_ptr(), first["b"][0].data_ptr())
    assert first["a"].data_ptr() != state["a"].data_ptr() and first["b"][1] == 7
    state["a"].fill_(2)
    second = stager.stage(state)
    assert (second["a"].data_ptr(), second["b"][0].data_ptr()) == pointers
    assert torch.equal(second["a"], torch.full((1000,), 2.0))
    third = stager.stage({"a": torch.ones(5), "b": [torch.zeros(10), 7]})  # a new shape, a new buffer
    assert third["a"].shape == (5,) and third["b"][0].data_ptr() == pointers[1]
    assert stager.nbytes() == 5 * 4 + 10 * 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_gpu_tensors_are_staged_in_pinned_host_memory():
    stager = Stager()
    weights = torch.arange(1 << 20, dtype=torch.float32, device="cuda")
    staged = stager.stage({"w": weights})
    weights.zero_()
    torch.cuda.synchronize()
    assert staged["w"].device.type == "cpu" and staged["w"].is_pinned()
    assert torch.equal(staged["w"], torch.arange(1 << 20, dtype=torch.float32))

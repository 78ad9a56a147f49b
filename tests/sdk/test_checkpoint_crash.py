"""A process killed between writing its data and committing the manifest leaves nothing committed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from torchyard.sdk import checkpoint

WORKERS = Path(__file__).resolve().parents[2] / "workers"

SAVER = """
import torch
from torchyard.sdk import checkpoint
checkpoint.save({"step": 2, "w": torch.ones(1000)}, 2)
print("the pause hook did not stop the save")
"""


def save_and_kill_before_commit(tmp_path: Path) -> None:
    """Run a save in a real subprocess, wait until it paused right before the commit, kill -9 it."""
    marker = tmp_path / "paused"
    env = {**os.environ, "TORCHYARD_TEST_PAUSE_BEFORE_COMMIT": str(marker), "PYTHONPATH": str(WORKERS)}
    proc = subprocess.Popen([sys.executable, "-c", SAVER], env=env)
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None, "the saver exited before reaching the commit point"
            assert time.monotonic() < deadline, "the saver never reached the commit point"
            time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL


def test_a_kill_before_the_commit_leaves_no_manifest_on_the_local_store(tmp_path):
    root = tmp_path / "checkpoints"
    assert checkpoint.save({"step": 1}, 1)
    save_and_kill_before_commit(tmp_path)

    assert (root / ".tmp-step-00000002" / "state.pt").is_file()  # the data was written ...
    assert not list(root.glob("*/manifest.json.tmp*"))
    assert [p.parent.name for p in root.glob("*/manifest.json")] == ["step-00000001"]  # ... never committed
    assert checkpoint.load_latest()[1] == 1

    assert checkpoint.save({"step": 2}, 2)  # the next attempt at the same step starts clean
    assert checkpoint.load_latest()[0] == {"step": 2}


@pytest.mark.usefixtures("s3_checkpoints")
def test_a_kill_before_the_commit_leaves_no_manifest_on_s3(tmp_path, s3_server):
    assert checkpoint.save({"step": 1}, 1)
    save_and_kill_before_commit(tmp_path)

    store = checkpoint.open_store(checkpoint.checkpoint_url())
    assert store.step_dirs() == {"step-00000001": True, "step-00000002": False}
    assert checkpoint.load_latest()[1] == 1
    assert checkpoint.save({"step": 2, "w": torch.zeros(3)}, 2)
    assert checkpoint.load_latest()[1] == 2

"""A process killed between writing its data and committing the manifest leaves nothing committed,
whether its save was synchronous or in flight on the background thread of an async save."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from sdk_support import torchrun_argv
from torchyard.sdk import checkpoint

HERE = Path(__file__).resolve().parent
WORKERS = HERE.parents[1] / "workers"

SAVER = """
import sys, time
import torch
from torchyard.sdk import checkpoint
if sys.argv[1] == "sync":
    checkpoint.save({"step": 2, "w": torch.ones(1000)}, 2)
    print("the pause hook did not stop the save")
else:
    pending = checkpoint.save({"step": 2, "w": torch.ones(1000)}, 2, async_=True)
    print("save returned", flush=True)
    while True:  # the training loop goes on while the save is in flight
        time.sleep(0.05)
"""


def wait_for(path: Path, proc: subprocess.Popen, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"the process exited before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def save_and_kill_before_commit(tmp_path: Path, mode: str) -> None:
    """Run a save in a real subprocess, wait until it paused right before the commit, kill -9 it."""
    marker = tmp_path / "paused"
    output = tmp_path / "saver.out"
    env = {**os.environ, "TORCHYARD_TEST_PAUSE_BEFORE_COMMIT": str(marker), "PYTHONPATH": str(WORKERS)}
    with open(output, "w") as out:
        proc = subprocess.Popen([sys.executable, "-c", SAVER, mode], env=env, stdout=out)
    try:
        wait_for(marker, proc, "the saver reached the commit point")
        if mode == "async":
            deadline = time.monotonic() + 10
            while "save returned" not in output.read_text():  # printed after save() returned
                assert time.monotonic() < deadline, "save(async_=True) did not return"
                time.sleep(0.05)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        assert proc.wait(timeout=10) == -signal.SIGKILL


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_kill_before_the_commit_leaves_no_manifest_on_the_local_store(tmp_path, mode):
    root = tmp_path / "checkpoints"
    assert checkpoint.save({"step": 1}, 1)
    save_and_kill_before_commit(tmp_path, mode)

    assert (root / ".tmp-step-00000002" / "state.pt").is_file()  # the data was written ...
    assert not list(root.glob("*/manifest.json.tmp*"))
    assert [p.parent.name for p in root.glob("*/manifest.json")] == ["step-00000001"]  # ... never committed
    assert checkpoint.load_latest()[1] == 1

    assert checkpoint.save({"step": 2}, 2)  # the next attempt at the same step starts clean
    assert checkpoint.load_latest()[0] == {"step": 2}


@pytest.mark.usefixtures("s3_checkpoints")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_kill_before_the_commit_leaves_no_manifest_on_s3(tmp_path, s3_server, mode):
    assert checkpoint.save({"step": 1}, 1)
    save_and_kill_before_commit(tmp_path, mode)

    store = checkpoint.open_store(checkpoint.checkpoint_url())
    assert store.step_dirs() == {"step-00000001": True, "step-00000002": False}
    assert checkpoint.load_latest()[1] == 1
    assert checkpoint.save({"step": 2, "w": torch.zeros(3)}, 2)
    assert checkpoint.load_latest()[1] == 2


def test_a_rank_killed_while_its_async_save_is_in_flight_commits_nothing(tmp_path):
    """Two ranks under torchrun: step 1 commits; rank 1 is killed once its files of step 2 are
    written, before the ranks agree, while both go on training. Step 2 never commits, and a
    restart (this process, resharding to one rank) resumes from step 1."""
    out = tmp_path / "out"
    out.mkdir()
    root = tmp_path / "checkpoints"
    env = {**os.environ, "TORCHYARD_CHECKPOINT_URL": str(root), "PYTHONPATH": str(WORKERS)}
    with open(tmp_path / "torchrun.log", "w") as log:
        proc = subprocess.Popen(
            torchrun_argv(HERE / "async_kill_worker.py", str(out)), env=env, stdout=log, stderr=subprocess.STDOUT
        )
    try:
        wait_for(out / "paused", proc, "rank 1 paused in its save of step 2", timeout=120)
        # Training went on on both ranks (collectives on the default group) while the save was in flight.
        wait_for(out / "rank-1-trained", proc, "rank 1 trained with its save in flight")
        os.kill(int((out / "paused").read_text()), signal.SIGKILL)
        assert proc.wait(timeout=60) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    log = (tmp_path / "torchrun.log").read_text()

    assert (root / "step-00000001" / "manifest.json").is_file(), log[-3000:]
    assert not (root / "step-00000002" / "manifest.json").exists()
    assert (root / "LATEST").read_text().strip() == "step-00000001"
    into = {"w": torch.zeros(8)}
    _, step, manifest = checkpoint.load_latest(into=into)
    assert step == 1 and manifest["save"]["async"] is True
    assert torch.equal(into["w"], torch.arange(8.0) + 1)

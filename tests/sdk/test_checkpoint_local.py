"""Checkpoints on the local store: commit protocol, verification, fallback, retention.

Tests that save through the ``save`` fixture (conftest.py) run twice: with synchronous saves, and
with async ones (``async_=True``) waited for right away, which must keep every promise of the former.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
from sdk_support import flip_byte, sha256_of
from torchyard.sdk import checkpoint


def state_at(step: int) -> dict:
    return {"weights": torch.full((64,), float(step)), "step": step, "name": "mlp"}


@pytest.fixture
def root(tmp_path) -> Path:
    return tmp_path / "checkpoints"


def test_it_round_trips_a_state_with_a_complete_manifest(root, monkeypatch, save):
    monkeypatch.setenv("TORCHYARD_JOB_ID", "42")
    monkeypatch.setenv("TORCHYARD_ATTEMPT", "3")
    assert save(state_at(7), 7, metadata={"loss": 0.5})

    state, step, manifest = checkpoint.load_latest()
    assert step == 7
    assert torch.equal(state["weights"], torch.full((64,), 7.0)) and state["name"] == "mlp"
    data = root / "step-00000007" / "state.pt"
    assert manifest["files"] == [{"path": "state.pt", "size": data.stat().st_size, "sha256": sha256_of(data)}]
    assert manifest["total_bytes"] == data.stat().st_size
    assert (manifest["job_id"], manifest["attempt"], manifest["step"], manifest["world_size"]) == (
        42,
        3,
        7,
        1,
    )
    assert manifest["torch_version"] == torch.__version__ and manifest["created_at"]
    assert manifest["metadata"] == {"loss": 0.5} and manifest["sharded"] is False
    saved_async = getattr(save, "is_async", False)
    timing = manifest["save"]
    assert timing["async"] is saved_async and timing["blocking_seconds"] >= 0
    assert (timing["background_seconds"] is None) is not saved_async
    assert json.loads((root / "step-00000007" / "manifest.json").read_text()) == manifest
    assert (root / "LATEST").read_text().strip() == "step-00000007"
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step-00000007"]


def test_it_accepts_a_file_url(tmp_path, monkeypatch, save):
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", (tmp_path / "elsewhere").as_uri())
    assert save(state_at(1), 1)
    assert (tmp_path / "elsewhere" / "step-00000001" / "manifest.json").is_file()
    assert checkpoint.load_latest()[1] == 1


def test_load_latest_returns_none_when_there_is_no_checkpoint():
    assert checkpoint.load_latest() is None


def test_it_falls_back_when_the_newest_checkpoint_is_corrupt(root, capfd, save):
    for step in (10, 20, 30):
        assert save(state_at(step), step)
    flip_byte(root / "step-00000030" / "state.pt")

    state, step, _ = checkpoint.load_latest()
    assert step == 20 and state["step"] == 20
    err = capfd.readouterr().err
    assert "checkpoint at step 30" in err and "sha256" in err


def test_it_falls_back_when_a_file_of_the_newest_checkpoint_is_missing(root, capfd, save):
    for step in (10, 20):
        assert save(state_at(step), step)
    os.unlink(root / "step-00000020" / "state.pt")
    assert checkpoint.load_latest()[1] == 10
    assert "checkpoint at step 20" in capfd.readouterr().err


def test_it_returns_none_when_every_checkpoint_is_corrupt(root, save):
    assert save(state_at(1), 1)
    flip_byte(root / "step-00000001" / "state.pt", offset=10)
    assert checkpoint.load_latest() is None


def test_it_ignores_directories_without_a_manifest(root, save):
    assert save(state_at(5), 5)
    for leftover in ("step-00000009", ".tmp-step-00000012"):
        (root / leftover).mkdir()
        torch.save(state_at(9), root / leftover / "state.pt")
    (root / "LATEST").write_text("step-00000009\n")  # even when LATEST points at one

    assert checkpoint.load_latest()[1] == 5


def test_it_finds_the_newest_commit_when_latest_is_missing(root, save):
    for step in (1, 2):
        assert save(state_at(step), step)
    (root / "LATEST").unlink()
    assert checkpoint.load_latest()[1] == 2


def test_the_resume_manifest_wins_and_falls_back_to_older_ones_only(root, monkeypatch, save):
    for step in (1, 2, 3):
        assert save(state_at(step), step)
    uri = (root / "step-00000002" / "manifest.json").as_uri()
    monkeypatch.setenv("TORCHYARD_RESUME_MANIFEST", uri)
    assert checkpoint.load_latest()[1] == 2

    flip_byte(root / "step-00000002" / "state.pt")
    assert checkpoint.load_latest()[1] == 1  # the one before, never the newer step 3


def test_retention_keeps_the_newest_checkpoints(root, save):
    for step in range(1, 6):
        assert save(state_at(step), step, keep=2)
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step-00000004", "step-00000005"]


def test_retention_defaults_to_the_job_config_and_cleans_dead_unfinished_saves(root, tmp_path, monkeypatch, save):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"checkpointing": {"enabled": True, "every_n_steps": 5, "keep": 1}}))
    monkeypatch.setenv("TORCHYARD_CONFIG", str(config))
    assert checkpoint.settings()["every_n_steps"] == 5
    assert save(state_at(1), 1)
    (root / ".tmp-step-00000002").mkdir()  # a save that died
    (root / "step-00000003").mkdir()  # died after the rename, before its manifest
    assert save(state_at(4), 4)
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step-00000004"]


def test_a_failed_save_commits_nothing_and_the_next_save_works(root, capfd, save):
    assert save(state_at(1), 1)
    unpicklable = {"weights": torch.zeros(4), "fn": lambda: None}

    assert save(unpicklable, 2) is False
    assert "checkpoint at step 2 not saved" in capfd.readouterr().err
    assert sorted(p.name for p in root.iterdir()) == ["LATEST", "step-00000001"]
    assert checkpoint.load_latest()[1] == 1

    assert save(state_at(2), 2)
    assert checkpoint.load_latest()[1] == 2


def test_a_store_that_cannot_be_written_fails_the_save_without_raising(tmp_path, monkeypatch, capfd, save):
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("x")
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(blocker / "checkpoints"))
    assert save(state_at(1), 1) is False
    assert "not saved" in capfd.readouterr().err


def test_saving_a_committed_step_again_replaces_the_older_timeline(root, capfd, save):
    for step in (1, 2, 3):
        assert save(state_at(step), step)
    # An attempt resumed from step 1 reaches step 2 again with different weights.
    assert save({"step": 2, "weights": torch.zeros(2)}, 2)
    assert "replacing the checkpoint at step 2" in capfd.readouterr().err
    assert (root / "LATEST").read_text().strip() == "step-00000002"
    state, step, _ = checkpoint.load_latest()
    assert step == 2 and torch.equal(state["weights"], torch.zeros(2))


def test_sharded_saves_go_through_torch_distributed_checkpoint(root, save):
    assert save({"shard": torch.arange(3), "epoch": 2}, 8, sharded=True)
    manifest = json.loads((root / "step-00000008" / "manifest.json").read_text())
    assert manifest["sharded"] and manifest["layout"] == "torch.distributed.checkpoint"
    assert sorted(f["path"] for f in manifest["files"]) == [".metadata", "__0_0.distcp"]
    with pytest.raises(RuntimeError, match=r"pass the state to load it into, load_latest\(into=state\)"):
        checkpoint.load_latest()

    into = {"shard": torch.zeros(3, dtype=torch.long), "epoch": 0}
    state, step, _ = checkpoint.load_latest(into=into)
    assert state is into and step == 8
    assert torch.equal(into["shard"], torch.arange(3)) and into["epoch"] == 2


def test_a_sharded_checkpoint_with_a_bad_file_falls_back(root, capfd, save):
    assert save({"w": torch.full((4,), 1.0)}, 1, sharded=True)
    assert save({"w": torch.full((4,), 2.0)}, 2, sharded=True)
    flip_byte(root / "step-00000002" / "__0_0.distcp")
    into = {"w": torch.zeros(4)}
    _, step, _ = checkpoint.load_latest(into=into)
    assert step == 1 and torch.equal(into["w"], torch.full((4,), 1.0))
    assert "__0_0.distcp fails its sha256 check" in capfd.readouterr().err


def test_a_sharded_checkpoint_that_does_not_fit_the_state_raises_instead_of_starting_over(root, save):
    # Falling back would not help (older checkpoints have the same shape) and training from
    # scratch would overwrite the good checkpoints: a wrong template is the caller's to fix.
    assert save({"w": torch.ones(3)}, 1, sharded=True)
    with pytest.raises(RuntimeError, match=r"does not fit the state given to load it into: rank 0: .*Size mismatch"):
        checkpoint.load_latest(into={"w": torch.zeros(4)})
    with pytest.raises(RuntimeError, match=r"Missing key in checkpoint state_dict: extra"):
        checkpoint.load_latest(into={"w": torch.zeros(3), "extra": torch.zeros(1)})
    assert (root / "step-00000001" / "manifest.json").is_file()


def test_a_commit_sends_a_checkpoint_event_with_the_manifest(root, tmp_path, monkeypatch, save):
    path = str(tmp_path / "events.sock")
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as receiver:
        receiver.bind(path)
        receiver.settimeout(5)
        monkeypatch.setenv("TORCHYARD_EVENT_SOCKET", path)
        assert save(state_at(4), 4)
        event = json.loads(receiver.recv(1 << 16))
    assert (event["type"], event["rank"], event["step"]) == ("checkpoint", 0, 4)
    assert event["uri"] == (root / "step-00000004" / "manifest.json").as_uri()
    assert event["manifest"] == json.loads((root / "step-00000004" / "manifest.json").read_text())

"""Checkpoints under a real two-process gloo group launched by torchrun (barrier and agreement)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import torch
from sdk_support import WORKERS, torchrun_argv
from torchyard.sdk import checkpoint

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_two_ranks_save_and_load_together_and_compress_gradients(tmp_path, monkeypatch, mode):
    out = tmp_path / "out"
    out.mkdir()
    root = tmp_path / "checkpoints"
    env = {**os.environ, "TORCHYARD_CHECKPOINT_URL": str(root), "PYTHONPATH": str(WORKERS)}
    result = subprocess.run(
        torchrun_argv(HERE / "distributed_checkpoint_worker.py", str(out), mode),
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    seen = [json.loads((out / f"rank-{r}.json").read_text()) for r in (0, 1)]
    for rank, rank_seen in enumerate(seen):
        assert (
            rank_seen["replicated_saved"] and rank_seen["sharded_saved_5"] and rank_seen["sharded_saved_10"]
        )
        half = slice(4 * rank, 4 * rank + 4)
        assert rank_seen["first_load"] == {
            "step": 10, "in_place": True, "local": (torch.arange(8.0) + 10)[half].tolist(), "note": "step 10",
            "files": [".metadata", "__0_0.distcp", "__1_0.distcp"],
        }  # fmt: skip
        assert rank_seen["after_corruption"] == {
            "step": 5, "local": (torch.arange(8.0) + 5)[half].tolist(), "note": "step 5",
        }  # fmt: skip
        assert rank_seen["one_bad_rank_saved"] is False and rank_seen["unshared_store_saved"] is False
        assert (
            rank_seen["fp16_grads_equal"]
            and rank_seen["bf16_grads_equal"]
            and rank_seen["powersgd_grads_equal"]
        )

    manifest = json.loads((root / "step-00000010" / "manifest.json").read_text())
    assert manifest["world_size"] == 2 and manifest["sharded"] is True
    assert manifest["save"]["async"] is (mode == "async") and manifest["save"]["blocking_seconds"] >= 0
    assert (manifest["save"]["background_seconds"] is None) is (mode == "sync")
    assert (
        json.loads((root / "step-00000001" / "manifest.json").read_text())["files"][0]["path"] == "state.pt"
    )
    assert not (root / "step-00000020").exists() and not (root / ".tmp-step-00000020").exists()
    assert "__1_0.distcp fails its sha256 check" in result.stderr
    assert "checkpoint at step 20 not saved" in result.stderr
    assert "not visible on this machine: a filesystem checkpoint store for a multi-machine job" in result.stderr
    assert not (root / "step-00000015").exists() and not (root / ".tmp-step-00000015").exists()
    assert "bf16 gradient compression needs nccl; using fp16" in result.stderr

    # torch.distributed.checkpoint reshards: one process loads the two ranks' halves whole.
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(root))
    into = {"w": torch.zeros(8), "note": ""}
    _, step, _ = checkpoint.load_latest(into=into)
    assert step == 5 and torch.equal(into["w"], torch.arange(8.0) + 5) and into["note"] == "step 5"

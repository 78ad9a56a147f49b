"""The built-in recipes honour what DistroML's JobSpec and the Go scheduler's task params name: `epochs`
(passes over the dataset, or over a declared size of synthetic data) sets their steps, `optimizer`,
`momentum`, `weight_decay` and `learning_rate` build their optimizer, and the checkpoint manifest
says the epoch, strategy, backend and whether optimizer and RNG state are in it. What a recipe
cannot take, it refuses by name (the control plane does first: tests/jobs/spec)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from sdk_support import WORKERS, torchrun_argv
from torchyard import recipe_params, sdk
from torchyard.sdk import checkpoint

EXAMPLES = WORKERS / "torchyard" / "examples"


def run(argv: list[str], tmp_path: Path, config: dict, expect: int = 0) -> subprocess.CompletedProcess:
    (tmp_path / "config.json").write_text(json.dumps(config))
    env = {**os.environ, "TORCHYARD_CONFIG": str(tmp_path / "config.json"),
           "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}
    result = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=240)
    assert result.returncode == expect, f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def latest_manifest(tmp_path: Path) -> dict:
    step_dir = (tmp_path / "ckpt" / "LATEST").read_text().strip()
    return json.loads((tmp_path / "ckpt" / step_dir / "manifest.json").read_text())


def test_every_recipe_reads_what_the_control_plane_lets_through():
    from torchyard.examples import char_gpt, mlp_ddp

    assert set(recipe_params.READS["examples/mlp_ddp.py"]) == {*mlp_ddp.DEFAULTS, *recipe_params.COMMON, "dataset_size"}
    assert set(recipe_params.READS["examples/char_gpt.py"]) == {*char_gpt.DEFAULTS, *recipe_params.COMMON}
    assert recipe_params.READS["examples/mlp_fsdp.py"] == recipe_params.READS["examples/mlp_ddp.py"]


def test_epochs_of_declared_synthetic_data_set_the_steps_and_the_go_schedulers_params_the_optimizer(tmp_path):
    config = {"hyperparameters": {"epochs": 2, "dataset_size": 2000, "batch_size": 500, "optimizer": "sgd",
                                  "momentum": 0.9, "weight_decay": 0.0001, "learning_rate": 0.05},
              "checkpointing": {"enabled": True, "every_n_steps": 3}, "distributed": {"strategy": "data_parallel"}}
    result = run([sys.executable, str(EXAMPLES / "mlp_ddp.py"), "--log-every", "1"], tmp_path, config)
    # 2 passes over 2,000 samples in batches of 500.
    assert "training steps 1..8 (2 epochs of 2000 samples) with SGD" in result.stdout and "lr 0.05," in result.stdout
    assert "rank 0 step 8 loss" in result.stdout and "rank 0 step 9" not in result.stdout
    manifest = latest_manifest(tmp_path)
    assert {k: manifest[k] for k in ("step", "epoch", "strategy", "backend", "optimizer_state", "rng_state")} == {
        "step": 8, "epoch": 2, "strategy": "data_parallel", "backend": None, "optimizer_state": True,
        "rng_state": True}
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["LATEST", "step-00000003", "step-00000006",
                                                                     "step-00000008"]
    state = torch.load(tmp_path / "ckpt" / "step-00000008" / "state.pt", weights_only=True)
    group = state["optimizer"]["param_groups"][0]
    assert (group["lr"], group["momentum"], group["weight_decay"]) == (0.05, 0.9, 0.0001)

    # One more epoch: it resumes where the second ended (its generators too).
    config["hyperparameters"]["epochs"] = 3
    more = run([sys.executable, str(EXAMPLES / "mlp_ddp.py"), "--log-every", "1"], tmp_path, config)
    assert "resumed from checkpoint at step 8" in more.stdout
    assert "training steps 9..12 (3 epochs of 2000 samples) with SGD" in more.stdout and "from global sample 4000" in more.stdout
    assert latest_manifest(tmp_path)["epoch"] == 3


def test_an_epoch_of_digits_is_its_training_images_over_the_global_batch(tmp_path):
    pytest.importorskip("sklearn")
    config = {"hyperparameters": {"epochs": 1, "batch_size": 150}, "scaling": {"mode": "keep_global_batch"},
              "checkpointing": {"enabled": True, "every_n_steps": 100}, "dataset": "digits"}
    result = run(torchrun_argv(EXAMPLES / "mlp_ddp.py", "--log-every", "1"), tmp_path, config)
    # 1,500 images in global batches of 150 (75 per rank on each of 2).
    assert "training steps 1..10 (1 epochs of 1500 samples) with Adam, batch 75 per rank (global 150)" in result.stdout
    manifest = latest_manifest(tmp_path)
    assert (manifest["step"], manifest["epoch"], manifest["backend"], manifest["world_size"]) == (10, 1, "gloo", 2)


def test_char_gpt_counts_an_epoch_in_windows_of_the_corpus(tmp_path):
    config = {"hyperparameters": {"epochs": 1, "batch_size": 512, "block_size": 32, "n_layer": 1, "n_head": 2,
                                  "n_embd": 16, "optimizer": "adam", "weight_decay": 0},
              "checkpointing": {"enabled": True, "every_n_steps": 1000}}
    result = run([sys.executable, str(EXAMPLES / "char_gpt.py"), "--sample-chars", "0"], tmp_path, config)
    from torchyard.examples.char_gpt import build_corpus

    steps = -(-(len(build_corpus()) // 32) // 512)
    assert f"rank 0 step {steps} loss" in result.stdout
    manifest = latest_manifest(tmp_path)
    assert (manifest["step"], manifest["epoch"], manifest["optimizer_state"]) == (steps, 1, True)


def test_a_recipe_run_by_plain_torchrun_refuses_what_it_cannot_take_by_name(tmp_path):
    config = {"hyperparameters": {"epochs": 2, "momentum": 0.9, "nesterov": True}}
    result = run([sys.executable, str(EXAMPLES / "mlp_ddp.py"), "--steps", "5"], tmp_path, config, expect=2)
    assert result.stderr.splitlines() == [
        "rank 0: hyperparameters.nesterov: mlp_ddp.py does not read nesterov; it reads batch_size, lr, learning_rate, "
        "epochs, optimizer, momentum, weight_decay, hidden, input_dim, dataset_size.",
        "rank 0: hyperparameters.momentum: momentum is sgd's; mlp_ddp.py runs adam (give optimizer: sgd, or leave "
        "momentum out).",
        "rank 0: hyperparameters.epochs: give epochs or --steps in args, not both: epochs set the recipe's steps.",
    ]
    assert not (tmp_path / "ckpt").exists()


def test_the_jobs_learning_rate_by_the_go_schedulers_name_is_the_one_scaled(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"hyperparameters": {"learning_rate": 0.001},
                                "scaling": {"mode": "scale_global_batch"}}))
    monkeypatch.setenv("TORCHYARD_CONFIG", str(path))
    monkeypatch.setenv("WORLD_SIZE", "4")
    hp = sdk.config({"lr": 0.01, "batch_size": 8})
    assert "lr" not in hp and hp["learning_rate"] == pytest.approx(0.004)
    assert recipe_params.learning_rate(hp) == pytest.approx(0.004)


def test_the_manifest_describes_what_a_state_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(tmp_path / "ckpt"))
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    assert checkpoint.save({"weights": model.state_dict()}, 1)
    bare = latest_manifest(tmp_path)
    assert {k: bare[k] for k in ("epoch", "strategy", "backend", "optimizer_state", "rng_state")} == {
        "epoch": None, "strategy": "data_parallel", "backend": None, "optimizer_state": False, "rng_state": False}

    rng = checkpoint.rng_state()
    assert checkpoint.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "rng": rng}, 2, epoch=4)
    full = latest_manifest(tmp_path)
    assert (full["epoch"], full["optimizer_state"], full["rng_state"]) == (4, True, True)

    # The generators come back as they were saved, Python's too (its state read back as lists).
    state, _, _ = checkpoint.load_latest()
    checkpoint.restore_rng(state["rng"])
    first = (torch.rand(3), random.random())
    torch.rand(5), random.random()  # they move on
    checkpoint.restore_rng(state["rng"])
    again = (torch.rand(3), random.random())
    assert torch.equal(again[0], first[0]) and again[1] == first[1]

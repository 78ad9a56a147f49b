"""Distributed adjustments of hyperparameters (torchyard.sdk.scaling and sdk.config())."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest
from torchyard import sdk
from torchyard.sdk.scaling import adjust_hyperparameters

HP = {"batch_size": 64, "lr": 0.001, "epochs": 2}


def test_keep_global_batch_divides_the_batch_and_leaves_the_lr_alone():
    result = adjust_hyperparameters(HP, {"mode": "keep_global_batch"}, world_size=4, rank=3)
    assert result["batch_size"] == 16
    assert result["lr"] == 0.001
    assert result["global_batch_size"] == 64
    assert (result["world_size"], result["rank"], result["epochs"]) == (4, 3, 2)


def test_keep_global_batch_refuses_a_batch_that_does_not_divide():
    with pytest.raises(ValueError, match=r"batch_size 64 does not divide evenly over 3 processes.*63 or 66"):
        adjust_hyperparameters(HP, {"mode": "keep_global_batch"}, world_size=3)


def test_scale_global_batch_multiplies_the_lr_by_the_world_size():
    result = adjust_hyperparameters(HP, {"mode": "scale_global_batch"}, world_size=4)
    assert result["batch_size"] == 64
    assert result["lr"] == pytest.approx(0.004)
    assert result["global_batch_size"] == 256


def test_scale_global_batch_with_the_sqrt_rule_multiplies_the_lr_by_the_root():
    scaling = {"mode": "scale_global_batch", "lr_rule": "sqrt", "warmup_steps": 500}
    result = adjust_hyperparameters({"batch_size": 32, "learning_rate": 0.1}, scaling, world_size=8)
    assert result["learning_rate"] == pytest.approx(0.1 * math.sqrt(8))
    assert result["batch_size"] == 32
    assert result["warmup_steps"] == 500


def test_mode_none_changes_nothing_but_reports_the_global_batch():
    result = adjust_hyperparameters(HP, {"mode": "none"}, world_size=2, rank=1)
    assert {k: result[k] for k in HP} == HP
    assert result["global_batch_size"] == 128


def test_it_does_not_modify_its_input():
    original = dict(HP)
    adjust_hyperparameters(original, {"mode": "keep_global_batch"}, world_size=2)
    assert original == HP


@pytest.mark.parametrize(
    ("scaling", "world_size", "message"),
    [
        ({"mode": "shrink"}, 2, "unknown scaling mode"),
        ({"mode": "scale_global_batch", "lr_rule": "cubic"}, 2, "unknown lr_rule"),
        ({"mode": "none"}, 0, "world_size must be a positive integer"),
    ],
)
def test_it_refuses_bad_settings_with_a_clear_message(scaling, world_size, message):
    with pytest.raises(ValueError, match=message):
        adjust_hyperparameters(HP, scaling, world_size=world_size)


def test_config_applies_the_job_scaling_for_this_rank(tmp_path, monkeypatch):
    path = tmp_path / "config.json"
    path.write_text(
        json.dumps({"hyperparameters": {"batch_size": 64}, "scaling": {"mode": "keep_global_batch"}})
    )
    monkeypatch.setenv("TORCHYARD_CONFIG", str(path))
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "1")
    result = sdk.config({"batch_size": 8, "lr": 0.5})
    assert (result["batch_size"], result["lr"], result["global_batch_size"], result["rank"]) == (
        32,
        0.5,
        64,
        1,
    )


def test_config_outside_torchyard_is_the_script_defaults():
    assert sdk.config({"lr": 0.5}) == {"lr": 0.5, "world_size": 1, "rank": 0, "global_batch_size": None}


def test_the_scaling_module_and_the_sdk_import_without_torch():
    code = (
        "import sys, torchyard.sdk.scaling, torchyard.sdk; "
        "from torchyard import sdk; sdk.config(); sdk.rank(); "
        "assert 'torch' not in sys.modules, 'torch was imported'; "
        "assert not any(m.startswith(('django', 'boto3')) for m in sys.modules)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

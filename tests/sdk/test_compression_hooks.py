"""Gradient compression hooks on a real two-process gloo group (torchrun): the bytes each rank hands
to the collectives per step, from the hooks' own counters, drop by the factor each method promises
for the model's shapes, the loss still falls, the replicas agree, and Top-K (our own hook) averages
exactly what a dense reference with error feedback says it should."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
from sdk_support import WORKERS, torchrun_argv
from torchyard.sdk.compression import resolve

HERE = Path(__file__).resolve().parent
FLOAT32 = 4


@pytest.fixture(scope="module")
def ranks(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("compression")
    result = subprocess.run(
        torchrun_argv(HERE / "compression_worker.py", str(out)),
        env={**os.environ, "PYTHONPATH": str(WORKERS)}, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return [json.loads((out / f"rank-{rank}.json").read_text()) for rank in (0, 1)]


def powersgd_elements(shapes: list[list[int]], rank: int) -> int:
    """What PowerSGD all-reduces for one bucket: P (n x r) and Q (m x r) of each matrix it finds
    worth compressing (torch's test: (n + m) r times min_compression_rate 2 < n m), every other
    tensor whole."""
    total = 0
    for shape in shapes:
        n, m = shape[0], math.prod(shape[1:])
        r = min(n, m, rank)
        total += (n + m) * r if len(shape) > 1 and (n + m) * r * 2 < n * m else n * m
    return total


def test_each_hook_sends_the_bytes_its_method_promises(ranks):
    for seen in ranks:
        shapes = seen["none"]["shapes"]
        dense = sum(math.prod(shape) for shape in shapes) * FLOAT32  # one bucket: the whole model
        assert dense == 25_348
        assert seen["none"]["sent_per_step"] == [dense] * 40
        assert seen["fp16"]["sent_per_step"] == [dense // 2] * 40
        # Two plain all-reduce steps (start_iter 2), then P and Q.
        powersgd = powersgd_elements(shapes, rank=1) * FLOAT32
        assert seen["powersgd"]["sent_per_step"] == [dense] * 2 + [powersgd] * 38
        assert powersgd == 1_668  # 15x less than dense
        # ceil(5% of 6,337 entries) = 317, each a float32 value and an int32 index.
        assert seen["topk"]["sent_per_step"] == [math.ceil(0.05 * dense / FLOAT32) * 8] * 40 == [2_536] * 40
        for hook in ("none", "fp16", "powersgd", "topk"):
            counted = seen[hook]
            assert counted["steps_counted"] == 40 and counted["grad_bytes"] == 40 * dense
            # What the recipes report (sdk.comm_metrics): the means over the steps since the last read.
            assert counted["reported"]["comm_bytes_per_step"] == sum(counted["sent_per_step"]) / 40
            assert counted["reported"]["grad_bytes_per_step"] == dense


def test_the_loss_still_falls_and_the_replicas_agree_under_every_hook(ranks):
    for seen in ranks:
        for hook in ("none", "fp16", "powersgd", "topk"):
            losses = seen[hook]["losses"]
            first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
            assert last < first / 3, (hook, first, last)
            assert seen[hook]["replicas_equal"], hook


def test_topk_averages_each_ranks_largest_entries_with_error_feedback(ranks):
    assert all(seen["topk_matches_reference"] for seen in ranks)


@pytest.mark.parametrize(("settings", "message"), [
    ({"enabled": True, "hook": "topk", "ratio": 0}, "ratio must be above 0 and at most 1"),
    ({"enabled": True, "hook": "powersgd", "start_iter": 1}, "start_iter must be 2 or more"),
    ({"enabled": True, "hook": "fp16", "rank": 2}, "rank is a setting of the powersgd hook, not of fp16"),
    ({"enabled": True, "hook": "onebit"}, "unknown compression hook 'onebit'"),
])
def test_a_script_passing_bad_settings_to_wrap_ddp_is_told_which(settings, message):
    with pytest.raises(ValueError, match=message):
        resolve(settings)


def test_compression_is_off_unless_enabled_or_a_hook_is_named():
    assert resolve({}) is None and resolve({"enabled": False, "hook": "topk"}) is None
    assert resolve({"hook": "powersgd"}) == {"hook": "powersgd", "rank": 1, "start_iter": 10}
    assert resolve({"enabled": True, "hook": "topk", "ratio": 0.1}) == {"hook": "topk", "ratio": 0.1}

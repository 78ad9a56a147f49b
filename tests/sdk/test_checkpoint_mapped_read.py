"""Sharded loads copy each tensor from the checked file's mapping into the state (mapped_read.py):
every kind of tensor DCP saves must come back exactly, and what the path does not cover must still
load through DCP's own reader."""

from __future__ import annotations

import pytest
import torch
import torch.distributed.checkpoint as dcp
from torchyard.sdk import checkpoint
from torchyard.sdk.checkpoint import mapped_read, sharded


def varied_state() -> dict:
    big = torch.randn(3 << 20)  # 12 MB: its copy goes in pieces side by side when the total is large
    return {
        "big": big,
        "also_big": torch.randn(1 << 20, 16),  # 64 MB, so the copies run on several threads
        "transposed": torch.arange(12.0).reshape(3, 4).t(),  # saved with its strides
        "half": torch.randn(5, 7).half(),
        "bf16": torch.randn(9).bfloat16(),
        "ints": torch.arange(-5, 5, dtype=torch.int64),
        "mask": torch.tensor([True, False, True]),
        "scalar": torch.tensor(3.5),
        "empty": torch.zeros(0, 4),
        "odd_bytes": torch.arange(7, dtype=torch.uint8),  # makes the next item start unaligned
        "after_odd": torch.randn(33),
        "step": 12,
        "name": "varied",
    }


def zeros_like_state(state: dict) -> dict:
    return {k: torch.zeros_like(v) if isinstance(v, torch.Tensor) else None for k, v in state.items()}


def test_every_kind_of_tensor_comes_back_exactly(root_url, save):
    saved = varied_state()
    assert save(saved, 3, sharded=True)
    into = zeros_like_state(saved)
    _, step, _ = checkpoint.load_latest(into=into)
    assert step == 3
    for key, value in saved.items():
        if isinstance(value, torch.Tensor):
            assert into[key].dtype == value.dtype and torch.equal(into[key], value), key
        else:
            assert into[key] == value, key


def test_the_mapping_serves_the_tensors_and_dcp_only_the_rest(tmp_path, monkeypatch):
    saved = varied_state()
    dcp.save(saved, checkpoint_id=str(tmp_path), no_dist=True)
    left_over: list = []
    original = mapped_read.read_file

    def recording(path, reqs, storage_data, planner):
        left = original(path, reqs, storage_data, planner)
        left_over.extend(left)
        return left

    monkeypatch.setattr(mapped_read, "read_file", recording)
    files = {p.name: {"path": p.name} for p in tmp_path.iterdir()}
    reader = sharded.VerifyingReader(str(tmp_path), files, None)
    monkeypatch.setattr(reader, "_check_all", lambda names: None)  # no manifest here: DCP's own files
    into = zeros_like_state(saved)
    dcp.load(into, storage_reader=reader, no_dist=True)

    assert all(torch.equal(into[k], v) for k, v in saved.items() if isinstance(v, torch.Tensor))
    assert (into["step"], into["name"]) == (12, "varied")
    names = {reader.storage_data[item.storage_index].relative_path for item in left_over}
    fqns = sorted(item.dest_index.fqn for item in left_over)
    # Non-tensors are DCP's (an empty tensor has no bytes to map, if DCP plans a read for it at
    # all); every other tensor came from the mapping, the unaligned ones byte for byte.
    assert {"step", "name"} <= set(fqns) <= {"step", "name", "empty"}, fqns
    assert names <= {p.name for p in tmp_path.iterdir()}


@pytest.fixture
def root_url(tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHYARD_CHECKPOINT_URL", str(tmp_path / "checkpoints"))
    return tmp_path / "checkpoints"

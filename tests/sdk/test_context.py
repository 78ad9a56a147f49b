"""Ranks from the environment, sharding, and the behaviour off Torchyard."""

from __future__ import annotations

import os
import subprocess

import pytest
from sdk_support import WORKERS, torchrun_argv
from torchyard import sdk


def test_a_plain_process_is_rank_zero_of_one():
    assert (sdk.rank(), sdk.world_size(), sdk.local_rank(), sdk.node_rank()) == (0, 1, 0, 0)
    assert not sdk.is_distributed()
    assert not sdk.is_distributed_training()
    assert sdk.is_main_process() and sdk.should_save_outputs()
    assert sdk.init_process_group() is False
    model = object()
    assert sdk.wrap_ddp(model) is model


def test_ranks_come_from_the_torchrun_and_torchyard_environment(monkeypatch):
    for name, value in {
        "RANK": "5",
        "WORLD_SIZE": "8",
        "LOCAL_RANK": "1",
        "TORCHYARD_NODE_RANK": "2",
    }.items():
        monkeypatch.setenv(name, value)
    assert (sdk.rank(), sdk.world_size(), sdk.local_rank(), sdk.node_rank()) == (5, 8, 1, 2)
    assert sdk.is_distributed() and not sdk.is_main_process() and not sdk.should_save_outputs()


def test_print_distributed_info_prints_one_line(capsys, monkeypatch):
    monkeypatch.setenv("TORCHYARD_JOB_ID", "42")
    sdk.print_distributed_info()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and "rank=0/1" in lines[0] and "job=42" in lines[0]


def test_shard_is_a_deterministic_round_robin_that_covers_every_item_once():
    items = list(range(23))
    shares = [sdk.shard(items, rank=r, world_size=4) for r in range(4)]
    assert shares[1] == [1, 5, 9, 13, 17, 21]
    assert sorted(x for share in shares for x in share) == items
    assert shares == [sdk.shard(items, rank=r, world_size=4) for r in range(4)]


def test_shard_takes_rank_and_world_size_from_the_environment_and_accepts_iterators(monkeypatch):
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "3")
    assert sdk.shard(iter("abcdefgh")) == ["c", "f"]
    with pytest.raises(ValueError):
        sdk.shard([1, 2], rank=3, world_size=3)


def test_get_accelerator_explains_how_to_install_accelerate_when_missing():
    try:
        import accelerate  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install accelerate"):
            sdk.get_accelerator()
    else:
        assert sdk.get_accelerator() is not None


def test_a_script_that_never_leaves_its_process_group_has_it_destroyed_before_python_finalizes(tmp_path):
    """Python runs atexit hooks last-registered first: the script's hook, registered before the SDK's,
    sees what the interpreter's finalization would start from."""
    script = tmp_path / "no_shutdown.py"
    script.write_text(
        "import atexit, gc, torch.distributed as dist\n"
        "from torch import nn\n"
        "from torchyard import sdk\n"
        # One write per line: both ranks share the pipe, and print() writes its arguments apart.
        "atexit.register(lambda: print(f'after the sdk: {dist.is_initialized()} {gc.collect() == 0}', flush=True))\n"
        "assert sdk.init_process_group() is True\n"
        "model = nn.Linear(2, 2)\n"
        "model.cycle = [model]  # something in a reference cycle, as an FSDP model is\n"
        "del model\n"
    )
    env = {**os.environ, "PYTHONPATH": str(WORKERS), "TORCHYARD_DIST_BACKEND": "gloo"}
    done = subprocess.run(torchrun_argv(script), env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("after the sdk: False True") == 2  # both ranks

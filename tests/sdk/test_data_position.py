"""The global sample position (sdk.shard's start, sdk.GlobalSampler): a job resumed on another world
size goes on at the same sample, none seen twice and none skipped."""

from __future__ import annotations

import pytest
from torchyard import sdk
from torchyard.sdk.data import GlobalSampler, shard
from torchyard.sdk.scaling import adjust_hyperparameters


def run(world: int, batch: int, steps: int, *, size: int = 1000, state: dict | None = None,
        **options) -> tuple[list[list[int]], dict]:
    """`steps` steps of `world` ranks in lockstep: the samples of each step (every rank's, in rank
    order) and the checkpoint state rank 0 would save."""
    samplers = [GlobalSampler(size, batch_size=batch, rank=r, world_size=world, **options) for r in range(world)]
    if state is not None:
        for sampler in samplers:
            sampler.load_state_dict(state)
    seen = [[i for sampler in samplers for i in sampler.next_batch()] for _ in range(steps)]
    assert len({s.position for s in samplers}) == 1
    return seen, samplers[0].state_dict()


def flat(steps: list[list[int]]) -> list[int]:
    return [i for step in steps for i in step]


def test_a_resume_on_fewer_ranks_continues_at_the_same_global_sample():
    # keep_global_batch 12: 4 per rank on 3 ranks, 6 per rank on 2 (scaling recomputes it).
    before, state = run(3, adjust_hyperparameters({"batch_size": 12}, {"mode": "keep_global_batch"}, 3)["batch_size"], 5)
    after, state = run(2, adjust_hyperparameters({"batch_size": 12}, {"mode": "keep_global_batch"}, 2)["batch_size"], 5,
                       state=state)
    assert flat(before) + flat(after) == list(range(120))
    assert all(len(step) == 12 for step in before + after)  # the global batch unchanged
    assert state["position"] == 120


def test_a_grow_back_and_a_changing_global_batch_stay_continuous():
    first, state = run(2, 6, 3)
    second, state = run(3, 4, 2, state=state)
    third, state = run(4, 5, 2, state=state)  # scale_global_batch: another global batch, still continuous
    assert flat(first) + flat(second) + flat(third) == list(range(36 + 24 + 40))


def test_epochs_wrap_and_a_shuffled_order_is_the_same_on_every_rank_and_after_a_resume():
    straight, _ = run(2, 5, 3, size=20)
    assert flat(straight) == list(range(20)) + list(range(10))
    whole, _ = run(2, 5, 4, size=20, shuffle=True, seed=7)  # two epochs, each its own order
    first, second = flat(whole)[:20], flat(whole)[20:]
    assert sorted(first) == sorted(second) == list(range(20)) and first != list(range(20)) and first != second
    head, state = run(2, 5, 1, size=20, shuffle=True, seed=7)
    tail, _ = run(5, 2, 3, size=20, shuffle=True, seed=7, state=state)
    assert flat(head) + flat(tail) == flat(whole)


def test_peek_does_not_move_and_the_state_is_global():
    sampler = GlobalSampler(100, batch_size=3, rank=1, world_size=2, position=30)
    assert sampler.peek() == [33, 34, 35] == sampler.next_batch()
    assert sampler.state_dict() == {"position": 36, "seed": 0, "size": 100}
    assert sampler.global_batch_size == 6 and sampler.epoch == 0


@pytest.mark.parametrize("kwargs", [{"size": 0}, {"batch_size": 0}, {"position": -1}, {"batch_size": 2.5},
                                    {"rank": 2, "world_size": 2}])
def test_bad_arguments_are_refused(kwargs):
    with pytest.raises(ValueError):
        GlobalSampler(**{"size": 10, "batch_size": 2, "rank": 0, "world_size": 1, **kwargs})


def test_a_state_without_a_position_is_refused():
    with pytest.raises(ValueError, match="global position"):
        GlobalSampler(10, batch_size=2, rank=0, world_size=1).load_state_dict({"position": "3"})


def test_shard_from_a_global_position_splits_the_rest_between_the_new_ranks():
    items = list(range(20))
    # 3 ranks took 2 items each (position 6); 2 ranks share what is left, none twice, none skipped.
    taken = [i for r in range(3) for i in shard(items, r, 3)[:2]]
    rest = [shard(items, r, 2, start=6) for r in range(2)]
    assert sorted(taken + rest[0] + rest[1]) == items and sorted(taken) == list(range(6))
    assert shard(iter(items), 1, 2, start=6) == rest[1]
    with pytest.raises(ValueError):
        shard(items, 0, 1, start=-1)


def test_the_sampler_is_part_of_the_sdk():
    assert sdk.GlobalSampler is GlobalSampler
    # Outside a launch: one rank that takes every sample.
    assert GlobalSampler(10, batch_size=4).next_batch() == [0, 1, 2, 3]


def test_the_mlp_recipe_resumed_on_fewer_ranks_goes_on_at_the_saved_global_sample(tmp_path):
    import json
    import os
    import subprocess
    import sys

    from sdk_support import WORKERS, torchrun_argv

    recipe = WORKERS / "torchyard" / "examples" / "mlp_ddp.py"
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"hyperparameters": {"batch_size": 12}, "scaling": {"mode": "keep_global_batch"},
                                  "checkpointing": {"enabled": True, "every_n_steps": 5, "keep": 2}}))
    env = {**os.environ, "TORCHYARD_CONFIG": str(config), "TORCHYARD_CHECKPOINT_URL": str(tmp_path / "ckpt")}

    def run(argv: list[str]) -> str:
        result = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        return result.stdout

    first = run(torchrun_argv(recipe, "--steps", "10"))
    assert "batch 6 per rank (global 12)" in first and "from global sample 0" in first
    # One process now (an elastic job that shrank): 12 per rank, from the 120th sample on.
    second = run([sys.executable, str(recipe), "--steps", "15"])
    assert "resumed from checkpoint at step 10" in second
    assert "batch 12 per rank (global 12), lr 0.01, checkpoint every 5, from global sample 120" in second

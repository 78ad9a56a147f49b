"""`checkpointing.every_n_steps` in the SDK (torchyard.sdk.checkpoint.cadence): a fixed number of steps, or
"auto", Young/Daly's interval from what a save costs and how often the job's machines fail, turned into
steps from the measured step time, agreed by every rank and announced when it changes."""

from __future__ import annotations

import math

import pytest
from torchyard.sdk.checkpoint.cadence import AUTO, FIRST_STEPS, Cadence, young_daly


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def run(cadence: Cadence, clock: Clock, steps: range, step_s: float, save_s: float) -> list[int]:
    """The steps a loop taking `step_s` a step saves at, each save blocking `save_s`."""
    saved = []
    for step in steps:
        clock.now += step_s
        if cadence.due(step):
            clock.now += save_s
            cadence.saved(step, save_s)
            saved.append(step)
    return saved


def test_a_number_of_steps_saves_at_its_multiples_and_zero_never():
    clock = Clock()
    assert run(Cadence(50, clock=clock), clock, range(1, 201), 0.1, 0.5) == [50, 100, 150, 200]
    assert run(Cadence(0, clock=clock), clock, range(1, 201), 0.1, 0.5) == []
    assert not Cadence(0).enabled and Cadence(0).plan() == "-"


def test_auto_saves_first_after_the_first_steps_then_at_young_dalys_interval_in_steps():
    clock, said = Clock(), []
    cadence = Cadence(AUTO, mtbf_s=3600.0, why="2 fault(s) in 10.0 machine-hours", clock=clock,
                      announce=lambda step, interval, line: said.append((step, interval, line)))
    assert cadence.plan() == f"auto (first after {FIRST_STEPS} steps)"
    saved = run(cadence, clock, range(1, 2001), 0.1, 0.5)
    # sqrt(2 x 0.5 s x 3600 s) = 60 s, 600 steps of 0.1 s.
    assert young_daly(0.5, 3600.0) == pytest.approx(60.0)
    assert saved == [FIRST_STEPS, FIRST_STEPS + 600, FIRST_STEPS + 1200, FIRST_STEPS + 1800]
    # Announced once: the later saves change nothing.
    assert len(said) == 1
    step, interval, line = said[0]
    assert step == FIRST_STEPS and interval == pytest.approx(60.0)
    assert "every 600 steps" in line and "a save blocks the loop 0.50 s" in line and "1.0 h" in line
    assert "2 fault(s) in 10.0 machine-hours" in line and "Young/Daly" in line


def test_auto_revises_when_saves_get_dearer_and_says_so():
    clock, said = Clock(), []
    cadence = Cadence(AUTO, mtbf_s=3600.0, clock=clock, announce=lambda *args: said.append(args))
    run(cadence, clock, range(1, 101), 0.1, 0.5)
    run(cadence, clock, range(101, 8000), 0.1, 8.0)  # a save now blocks 8 s: sqrt(2 x 8 x 3600) = 240 s
    # The expected cost follows the saves' (a running mean), and the interval with it, towards 240 s.
    intervals = [interval for _, interval, _ in said]
    assert intervals[0] == pytest.approx(60.0) and intervals == sorted(intervals) and len(intervals) >= 3
    assert 200 < cadence.interval_s <= 240 and cadence.every == round(cadence.interval_s / 0.1)


def test_every_rank_takes_the_interval_rank_0_chose():
    clock = Clock()
    # This rank measured its own steps; rank 0's count (agree: the broadcast) is the one it saves by.
    cadence = Cadence(AUTO, mtbf_s=3600.0, clock=clock, agree=lambda steps: 333)
    assert run(cadence, clock, range(1, 800), 0.1, 0.5) == [FIRST_STEPS, FIRST_STEPS + 333, FIRST_STEPS + 666]


def test_without_an_estimate_a_machine_is_taken_to_fail_daily():
    assert Cadence(AUTO).mtbf_s == 24 * 3600
    assert young_daly(1.0, 24 * 3600) == pytest.approx(math.sqrt(2 * 86400))

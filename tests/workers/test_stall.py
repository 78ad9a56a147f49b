"""Stall detection's bookkeeping and its look at a real process from outside (supervisor/stall.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from torchyard.supervisor.stall import DEFAULT_MIN_TIMEOUT_S, StallWatch, process_state, python_stack


def test_a_rank_is_reported_once_when_its_step_stops_advancing_and_again_after_it_moved():
    watch = StallWatch(timeout=5)
    watch.step(0, 1, now=0.0)
    watch.step(1, 1, now=0.0)
    watch.step(0, 2, now=1.0)
    watch.step(1, 2, now=1.0)
    watch.step(0, 3, now=2.0)  # rank 1 stops at step 2
    assert watch.stalled(now=5.5) == []
    [stall] = watch.stalled(now=6.5)
    assert (stall.rank, stall.step, stall.stalled_for, stall.timeout) == (1, 2, 5.5, 5)
    assert [s.rank for s in watch.stalled(now=9.0)] == [0]  # rank 0 now; rank 1 not again
    watch.step(1, 3, now=10.0)
    assert [s.rank for s in watch.stalled(now=15.5)] == [1]


def test_the_default_timeout_is_ten_median_steps_but_at_least_a_minute():
    watch = StallWatch()
    assert watch.timeout() == DEFAULT_MIN_TIMEOUT_S
    for step in range(10):
        watch.step(0, step, now=step * 0.5)
    assert watch.timeout() == DEFAULT_MIN_TIMEOUT_S
    slow = StallWatch()
    for step in range(10):
        slow.step(0, step * 2, now=step * 20.0)  # 10 s a step
    assert slow.timeout() == 100.0


def test_a_resume_from_an_older_step_counts_as_progress():
    watch = StallWatch(timeout=5)
    watch.step(0, 40, now=0.0)
    watch.step(0, 30, now=4.0)
    assert watch.stalled(now=8.0) == []
    assert watch.snapshot(now=8.0) == {"0": [30, 4.0]}


def test_a_rank_that_reached_its_declared_total_is_finishing_not_stalled():
    watch = StallWatch(timeout=5)
    watch.step(0, 79, now=0.0, total=80)
    watch.step(1, 79, now=0.0, total=80)
    watch.step(0, 80, now=1.0, total=80)  # rank 0 is done; its evaluation and teardown take a while
    watch.step(1, 80, now=1.0)            # a rank that declared no total is watched as before
    assert [s.rank for s in watch.stalled(now=60.0)] == [1]
    watch.step(0, 10, now=61.0, total=80)  # resumed from an older checkpoint: watched again
    assert [s.rank for s in watch.stalled(now=70.0)] == [0]


def test_the_stack_of_a_stopped_process_is_read_from_outside():
    proc = subprocess.Popen([sys.executable, "-c", "import time\ndef waiting_here():\n    time.sleep(60)\nwaiting_here()"])
    try:
        time.sleep(0.5)
        proc.send_signal(signal.SIGSTOP)
        time.sleep(0.1)
        assert process_state(proc.pid) == "stopped"
        stack = python_stack(proc.pid)
        assert "waiting_here" in stack, stack
    finally:
        proc.kill()
        proc.wait()
    assert process_state(proc.pid) == "gone"

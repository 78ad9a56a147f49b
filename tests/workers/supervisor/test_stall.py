"""Stall detection's bookkeeping and its look at a real process from outside (supervisor/stall.py; the
stack reading itself is node/stacks.py)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

from torchyard.node.stacks import process_state, python_stack, stack_facts
from torchyard.supervisor.stall import AUTO_MIN_S, DEFAULT_MIN_TIMEOUT_S, Stall, StallWatch, examine


def test_a_rank_is_reported_once_when_its_step_stops_advancing_and_again_after_it_moved():
    watch = StallWatch(timeout=5)
    watch.step(0, 1, now=0.0)
    watch.step(1, 1, now=0.0)
    watch.step(0, 2, now=1.0)
    watch.step(1, 2, now=1.0)
    watch.step(0, 3, now=2.0)  # rank 1 stops at step 2
    watch.step(0, 4, now=4.5)
    assert watch.stalled(now=5.5) == []
    [stall] = watch.stalled(now=6.5)
    assert (stall.rank, stall.step, stall.stalled_for, stall.timeout) == (1, 2, 5.5, 5)
    assert [s.rank for s in watch.stalled(now=9.6)] == [0]  # rank 0 now; rank 1 not again
    watch.step(1, 3, now=10.0)
    assert [s.rank for s in watch.stalled(now=15.5)] == [1]


def test_a_stalled_rank_brings_the_nodes_ranks_that_stopped_with_it():
    watch = StallWatch(timeout=4)
    watch.step(0, 7, now=0.0)  # rank 0's metric came a moment before rank 1's: both then stopped
    watch.step(1, 7, now=0.3)
    watch.step(2, 7, now=0.3)
    watch.step(2, 8, now=2.5)  # rank 2 trains on
    assert [(s.rank, s.stalled_for) for s in watch.stalled(now=4.0)] == [(0, 4.0), (1, 3.7)]
    assert watch.stalled(now=4.5) == []  # reported once


def test_auto_is_the_fixed_minute_until_eight_steps_are_timed_then_twice_their_p95_at_least_15_s():
    watch = StallWatch()
    assert watch.deadline() == (DEFAULT_MIN_TIMEOUT_S, "auto: the fixed 60 s until 8 step times are known (0 so far)")
    for step in range(8):  # 7 intervals
        watch.step(0, step, now=step * 0.2)
    assert watch.timeout() == DEFAULT_MIN_TIMEOUT_S
    watch.step(0, 8, now=1.6)
    # A 0.2 s step: twice its p95 is far under the floor.
    limit, basis = watch.deadline()
    assert limit == AUTO_MIN_S and basis == "auto: 2 x the p95 step time (0.2 s between the last 8 steps reported), at least 15 s"

    slow = StallWatch()
    times = [10.0] * 18 + [30.0, 40.0]  # 10 s steps, and two slow ones (a checkpoint, an evaluation)
    now = 0.0
    slow.step(0, 0, now=now)
    for step, took in enumerate(times, start=1):
        now += took
        slow.step(0, step, now=now)
    assert slow.timeout() == 2 * 30.5  # the p95 of those twenty: between the 19th and the 20th
    [stall] = slow.stalled(now=now + 61.0)
    assert (stall.timeout, stall.basis) == (61.0, "auto: 2 x the p95 step time (30.5 s between the last 20 steps reported), at least 15 s")


def test_a_script_that_reports_every_tenth_step_is_timed_from_report_to_report():
    watch = StallWatch()
    for report in range(10):  # steps 0, 10, 20 ... every 12 s: 1.2 s a step
        watch.step(0, report * 10, now=report * 12.0)
    assert watch.timeout() == 24.0  # twice the 12 s between reports, not the 15 s floor over 1.2 s steps
    assert watch.stalled(now=9 * 12.0 + 23.0) == []


def test_a_number_the_job_sets_is_the_deadline_and_says_so():
    watch = StallWatch(timeout=3)
    for step in range(20):
        watch.step(0, step, now=step * 10.0)
    assert watch.deadline() == (3, "stall_timeout 3 s, set by the job")


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


# py-spy's dumps of two ranks of a DDP job (examples/mlp_ddp.py) once one was SIGSTOPped: the other
# waits in DDP's gradient all-reduce, inside backward.
WAITING = """Process 15250: /venv/bin/python -u mlp_ddp.py --steps 100000
Python v3.11.7 (/usr/bin/python3.11)

Thread 15250 (idle): "MainThread"
    _engine_run_backward (torch/autograd/graph.py:979)
    backward (torch/autograd/__init__.py:395)
    Tensor.backward (torch/_tensor.py:623)
    train (mlp_ddp.py:118)
    main (mlp_ddp.py:189)
    <module> (mlp_ddp.py:203)
"""
STOPPED = """Process 15251: /venv/bin/python -u mlp_ddp.py --steps 100000
Python v3.11.7 (/usr/bin/python3.11)

Thread 15252 (idle): "pt_elastic"
    wait (threading.py:331)
Thread 15251 (idle): "MainThread"
    train (mlp_ddp.py:138)
    main (mlp_ddp.py:189)
    <module> (mlp_ddp.py:203)
"""


def test_a_stack_says_whether_its_main_thread_waits_in_a_collective():
    assert stack_facts(WAITING) == ("_engine_run_backward (torch/autograd/graph.py:979)",
                                    "_engine_run_backward (torch/autograd/graph.py:979)")
    assert stack_facts(STOPPED) == ("", "train (mlp_ddp.py:138)")
    barrier = "Thread 7 (idle)\n    barrier (torch/distributed/distributed_c10d.py:4151)\n    wrapper (torch/distributed/c10d_logger.py:81)\n    save (ckpt.py:9)\n"
    assert stack_facts(barrier) == ("barrier (torch/distributed/distributed_c10d.py:4151)",
                                    "barrier (torch/distributed/distributed_c10d.py:4151)")
    assert stack_facts("(no stack: py-spy is not installed beside the agent)") == (None, None)


def test_every_stalled_rank_is_examined_the_most_suspicious_first():
    code = "import time\ndef {0}():\n    time.sleep(60)\n{0}()"
    procs = [subprocess.Popen([sys.executable, "-c", code.format(name)]) for name in ("rank_zero", "rank_one")]
    try:
        time.sleep(1.0)
        procs[1].send_signal(signal.SIGSTOP)
        time.sleep(0.1)
        stalls = [Stall(rank=r, step=5, stalled_for=3.0, timeout=3.0) for r in (0, 1, 2)]
        pids = {0: procs[0].pid, 1: procs[1].pid}  # rank 2's process has ended: left out
        seen = examine(stalls, pids.get, mask=lambda text: text.replace("rank_one", "***"))
        assert [(s.stall.rank, s.process_state) for s in seen] == [(1, "stopped"), (0, "sleeping")]
        assert seen[1].waits_in == "" and seen[1].frame and "rank_zero" in seen[1].frame
        assert "rank_one" not in seen[0].stack and "***" in (seen[0].frame or "")
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()

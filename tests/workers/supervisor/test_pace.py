"""A rank's own pace read from outside (supervisor/pace.py), on real processes: one that computes,
one that waits on a pipe (as a rank waits on its peers), one in time.sleep, one stopped."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from torchyard.supervisor.pace import PaceWatch, cpu_steal_s, run_delay_s, thread_state

BEHAVIOURS = {
    "computes": "while True: pass",
    "waits": "import sys; sys.stdin.read()",  # blocked on a pipe nobody writes to
    "sleeps": "import time; time.sleep(600)",
}


@contextlib.contextmanager
def processes(*names: str) -> Iterator[dict[str, subprocess.Popen]]:
    started = {name: subprocess.Popen([sys.executable, "-c", BEHAVIOURS[name.rstrip("0123456789")]],
                                      stdin=subprocess.PIPE) for name in names}
    try:
        time.sleep(0.5)  # past the interpreter's start: each is where it stays
        yield started
    finally:
        for proc in started.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGCONT)
            proc.kill()
            proc.wait()


def until_state(pid: int, wanted: str) -> str | None:
    state = None
    for _ in range(100):
        state = thread_state(pid)
        if state == wanted:
            break
        time.sleep(0.02)
    return state


def test_the_main_threads_state_tells_waiting_from_working_and_a_timed_sleep_from_both():
    with processes("computes", "waits", "sleeps", "waits2") as procs:
        os.kill(procs["waits2"].pid, signal.SIGSTOP)
        assert until_state(procs["computes"].pid, "R") == "R"
        assert until_state(procs["waits"].pid, "S") == "S"
        assert until_state(procs["sleeps"].pid, "N") == "N"  # time.sleep: on purpose, the rank's own time
        assert until_state(procs["waits2"].pid, "T") == "T"
        assert run_delay_s(procs["computes"].pid) is not None
    assert thread_state(procs["computes"].pid) is None  # gone


def test_a_window_gives_each_rank_its_own_time_per_step_and_says_it_was_stopped():
    """Ranks 0 and 1 both step every 0.1 s; rank 0's process computes, rank 1's waits on a pipe: rank 0's
    own step time is about the whole step, rank 1's about none of it. A stopped rank 2 is its own time too."""
    watch = PaceWatch(window_s=1.5)
    with processes("computes", "waits", "waits2") as procs:
        os.kill(procs["waits2"].pid, signal.SIGSTOP)
        pids = {0: procs["computes"].pid, 1: procs["waits"].pid, 2: procs["waits2"].pid}
        start = time.monotonic()
        step = 0
        report = None
        while report is None:
            now = time.monotonic()
            if now - start >= step * 0.1:
                for rank in pids:
                    watch.step(rank, step, now)
                step += 1
            watch.sample(pids, now)
            if watch.due(now):
                report = watch.report(pids, now, own_pids=set(pids.values()))
            time.sleep(0.02)
    ranks = report["ranks"]
    assert set(ranks) == {"0", "1", "2"}
    assert ranks["0"]["own_share"] > 0.8 and ranks["1"]["own_share"] < 0.2 and ranks["2"]["own_share"] > 0.8
    assert ranks["0"]["step_s"] == pytest.approx(0.1, rel=0.5)
    assert ranks["0"]["own_step_s"] > 4 * ranks["1"]["own_step_s"]
    assert ranks["2"]["stopped"] > 0.8 and ranks["0"]["stopped"] == 0
    assert report["host"]["cpus"] == os.cpu_count()
    if cpu_steal_s() is not None:
        assert report["host"]["steal"] >= 0


def test_a_rank_with_fewer_than_two_steps_in_the_window_has_no_pace_and_the_last_report_carries_over():
    watch = PaceWatch(window_s=0.0)
    pid = os.getpid()
    watch.sample({0: pid}, 0.0)
    watch.step(0, 5, 0.1)
    assert watch.report({0: pid}, 0.2, own_pids={pid}) is None  # one step: no step time
    watch.sample({0: pid}, 0.3)
    watch.step(0, 7, 0.4)  # the window started from step 5, carried over
    report = watch.report({0: pid}, 0.5, own_pids={pid})
    assert report is not None and report["ranks"]["0"]["steps"] == 2
    assert report["ranks"]["0"]["step_s"] == pytest.approx(0.15)

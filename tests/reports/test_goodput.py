"""A job's goodput split (reports/goodput.py) from facts written by hand: every second of its wall
time in exactly one category, by the module's precedence, the parts adding up to the wall time."""

from __future__ import annotations

import dataclasses

import pytest
from torchyard_server.reports.goodput import (
    CATEGORIES,
    Checkpoint,
    JobFacts,
    JobState,
    NodeState,
    Progress,
    Stall,
    job_goodput,
)

from reports import history

T0 = history.T0


def seconds(parts: dict[str, float]) -> dict[str, float]:
    """The categories that got any time, rounded to the millisecond."""
    return {category: round(value, 3) for category, value in parts.items() if round(value, 3)}


def test_a_queue_wait_a_recovery_and_a_preemption_split_to_the_second():
    split = job_goodput(history.facts())
    assert list(split.parts) == list(CATEGORIES)
    assert seconds(split.parts) == history.EXPECTED
    assert split.wall == history.END
    assert sum(split.parts.values()) == pytest.approx(split.wall, rel=0.01)
    assert split.goodput == pytest.approx(150 / 556)
    assert [a.attempt for a in split.attempts] == [0, 1, 2]
    for attempt in split.attempts:
        assert seconds(attempt.parts) == history.EXPECTED_ATTEMPTS[attempt.attempt]
        assert (attempt.start - T0, attempt.end - T0) == history.ATTEMPT_SPANS[attempt.attempt]
        assert sum(attempt.parts.values()) == pytest.approx(attempt.wall)
    # The wall time in order, every stretch once.
    assert [(s.start - T0, s.category) for s in split.segments][:8] == [
        (0, "queued"), (101, "launch"), (105, "code_fetch"), (115, "environment_build"), (145, "launch"),
        (150, "training"), (200, "checkpoint"), (202, "lost_work")]
    assert all(a.end == b.start for a, b in zip(split.segments, split.segments[1:], strict=False))


def running_job(*, steps: list[tuple[float, int]], end: float, status: str = "running", **more) -> JobFacts:
    """Queued 10 s, dispatched, ranks running at 20 s, then the given steps (second, step)."""
    return JobFacts(
        created=T0, end=T0 + end, status=status,
        states=[JobState(T0, "queued", 0), JobState(T0 + 10, "dispatching", 0), JobState(T0 + 20, "running", 0),
                *more.pop("states", [])],
        progress=[Progress(T0 + s, 0, step) for s, step in steps] + more.pop("progress", []), **more)


def test_a_stall_that_is_only_reported_hangs_until_the_steps_move_again():
    steps = [(20 + k, k) for k in range(1, 11)] + [(130 + k, k) for k in range(11, 21)]
    facts = running_job(steps=steps, end=160, status="completed", states=[JobState(T0 + 160, "completed", 0)],
                        stalls=[Stall(T0 + 90, 0, stalled_for=60.0, on_stall="report")])
    split = job_goodput(facts)
    # The last step before it at 30 s, detected at 90 s, the next step at 141 s; the last at 150 s.
    assert seconds(split.parts) == {"queued": 10, "launch": 10, "training": 19, "hang": 111, "idle": 10}


def test_a_live_job_trains_until_its_pause_is_longer_than_its_usual_step():
    steps = [(20 + k, k) for k in range(1, 31)]  # the last at 50 s
    assert seconds(job_goodput(running_job(steps=steps, end=52)).parts) == {"queued": 10, "launch": 10, "training": 32}
    # A minute without a step: one usual step is training, the rest idle.
    assert seconds(job_goodput(running_job(steps=steps, end=110)).parts) == {
        "queued": 10, "launch": 10, "training": 31, "idle": 59}


def test_a_script_that_reports_no_steps_trains_while_its_ranks_run_and_loses_what_follows_its_checkpoint():
    facts = JobFacts(
        created=T0, end=T0 + 200, status="completed",
        states=[JobState(T0, "queued", 0), JobState(T0 + 10, "dispatching", 0), JobState(T0 + 20, "running", 0),
                JobState(T0 + 100, "recovering", 0),
                JobState(T0 + 105, "dispatching", 1, "attempt 1, resuming from s3://b/ck/1/manifest.json"),
                JobState(T0 + 110, "running", 1), JobState(T0 + 200, "completed", 1)],
        node_states=[NodeState(T0 + 100, 7, 0, "failed", "exited 1")],
        checkpoints=[Checkpoint(0, 0, "s3://b/ck/1/manifest.json", T0 + 60, blocking=1.0)],
    )
    split = job_goodput(facts)
    assert seconds(split.parts) == {"queued": 10, "launch": 15, "training": 129, "checkpoint": 1, "recovery": 5,
                                    "lost_work": 40}
    assert seconds(split.attempts[1].parts) == {"launch": 5, "training": 90}


def test_an_async_save_blocks_before_its_background_work_and_a_row_alone_is_enough():
    facts = running_job(steps=[(20 + k, k) for k in range(1, 41)], end=60, status="completed",
                        states=[JobState(T0 + 60, "completed", 0)],
                        checkpoints=[Checkpoint(0, 20, "u", T0 + 45, blocking=0.5, background=4.5, saved_async=True)])
    split = job_goodput(facts)
    assert [(s.start - T0, s.end - T0, s.category) for s in split.segments if s.category == "checkpoint"] == [
        (40.0, 40.5, "checkpoint")]
    assert seconds(split.parts) == {"queued": 10, "launch": 10, "training": 39.5, "checkpoint": 0.5}
    # A job with no events at all (rows made by hand): its row's times.
    bare = JobFacts(created=T0, end=T0 + 30, status="running", started=T0 + 12)
    assert seconds(job_goodput(bare).parts) == {"queued": 12, "training": 18}
    assert seconds(job_goodput(dataclasses.replace(bare, started=None, status="queued")).parts) == {"queued": 30}


def test_a_node_lost_before_any_step_hangs_for_its_heartbeat_timeout():
    facts = running_job(steps=[], end=100, status="failed", heartbeat_timeout=15.0,
                        states=[JobState(T0 + 100, "failed", 0)],
                        node_states=[NodeState(T0 + 10, 3, 0, "launching"), NodeState(T0 + 20, 3, 0, "running"),
                                     NodeState(T0 + 100, 3, 0, "lost")],
                        progress=[Progress(T0 + 5, 9, 1)])  # another attempt's step: this job reports steps
    assert seconds(job_goodput(facts).parts) == {"queued": 10, "launch": 75, "hang": 15}

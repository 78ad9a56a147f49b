"""Retries spent only on faults: a rank that raises the same exception at the same step as in the
attempt before fails the job at once (fault_tolerance.retry_same_error, default 1); a fault of the
cluster (no exception: a lost machine, a killed process) keeps the whole max_restarts."""

from __future__ import annotations

import pytest
from factories import make_node
from torchyard import protocol
from torchyard_server.jobs.control.reports import node_report_state
from torchyard_server.jobs.models import Job, JobNode

pytestmark = pytest.mark.django_db(transaction=True)

ERROR = {"type": "ValueError", "message": "bad batch", "frame": "train.py:42 in step", "rank": 1, "step": 50}


def running(owner, *, attempt: int = 0, **fault_tolerance) -> Job:
    return Job.objects.create(name="j", owner=owner, status=Job.Status.RUNNING, attempt=attempt, world_size=2,
                              restarts=attempt, spec={"fault_tolerance": {"max_restarts": 5, **fault_tolerance}})


def failed_before(job: Job, attempt: int) -> JobNode:
    """Node 1 of an earlier attempt, failed with ERROR."""
    return make_node(job, attempt=attempt, node_rank=1, status=JobNode.Status.FAILED, error=ERROR)


def fail(job: Job, attempt: int, error: dict | None, *, node_rank: int = 1) -> JobNode:
    node = make_node(job, attempt=attempt, node_rank=node_rank, machine_name=f"m{node_rank}", host="10.0.0.1",
                     status=JobNode.Status.RUNNING)
    event = {"type": protocol.STATE, "node": node.pk, "status": protocol.NODE_FAILED, "exit_code": 1,
             "reason": f"node rank {node_rank}: torchrun exited with code 1"}
    if error is not None:
        event["error"] = error
    node_report_state(event=event)
    return node


def test_the_first_error_is_retried_and_kept_on_the_node(owner):
    job = running(owner)
    node = fail(job, 0, ERROR)
    job.refresh_from_db()
    node.refresh_from_db()
    assert job.status == Job.Status.RECOVERING
    assert node.error == ERROR


def test_the_same_error_at_the_same_step_twice_fails_the_job_naming_it(owner):
    job = running(owner, attempt=1)
    failed_before(job, 0)
    fail(job, 1, ERROR)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED
    assert job.status_reason.endswith(
        "the same error twice at step 50: not retried (ValueError: bad batch, raised at train.py:42 in step; "
        "fault_tolerance.retry_same_error)")


@pytest.mark.parametrize("other", [{**ERROR, "step": 51}, {**ERROR, "message": "bad batch 2"},
                                   {**ERROR, "frame": "train.py:43 in step"}, None])
def test_another_error_or_step_or_a_fault_of_the_cluster_is_retried(owner, other):
    job = running(owner, attempt=1)
    failed_before(job, 0)
    fail(job, 1, other)
    job.refresh_from_db()
    assert job.status == Job.Status.RECOVERING


def test_retry_same_error_counts_the_retries_of_one_error(owner):
    job = running(owner, attempt=2, retry_same_error=2)
    for attempt in (0, 1):
        failed_before(job, attempt)
    fail(job, 2, ERROR)
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "the same error 3 times at step 50" in job.status_reason
    zero = running(owner, retry_same_error=0)
    fail(zero, 0, {**ERROR, "step": None})
    zero.refresh_from_db()
    assert zero.status == Job.Status.FAILED
    assert "ValueError: bad batch: not retried (fault_tolerance.retry_same_error is 0" in zero.status_reason


def test_the_raising_node_reporting_after_another_failure_stops_the_recovery(owner):
    """The other node's ranks lose their peer and fail first (a broken collective, its own message);
    the node whose rank raised reports after, while the job already recovers: no relaunch."""
    job = running(owner, attempt=1)
    failed_before(job, 0)
    raising = make_node(job, attempt=1, node_rank=1, machine_name="m1", host="h", status=JobNode.Status.RUNNING)
    fail(job, 1, {**ERROR, "type": "RuntimeError", "message": "Connection closed by peer [10.0.0.2]:41234",
                  "rank": 0, "frame": "train.py:40 in step"}, node_rank=0)
    job.refresh_from_db()
    assert job.status == Job.Status.RECOVERING
    node_report_state(event={"type": protocol.STATE, "node": raising.pk, "status": protocol.NODE_FAILED,
                             "exit_code": 1, "reason": "node rank 1: torchrun exited with code 1", "error": ERROR})
    job.refresh_from_db()
    assert job.status == Job.Status.FAILED and "the same error twice at step 50" in job.status_reason

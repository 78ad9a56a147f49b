"""Stopping, preempting and deleting jobs."""

from __future__ import annotations

from django.db import transaction
from torchyard import protocol

from ...audit import services as audit
from ...celery import app as celery_app
from ..models import Job, JobNode
from ..states import JOB_FINAL, transition_job
from .nodes import live_nodes, stop_nodes

J, N = Job.Status, JobNode.Status


def job_stop(*, job_id: int, reason: str = "stop requested") -> Job | None:
    """Stop every node of the job: live -> stopping -> stopped (at once when nothing runs yet)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status in JOB_FINAL or job.status == J.STOPPING:
            return job
        audit.record(None, audit.Action.JOB_STOP, job, previous=job.status, reason=reason)
        live = live_nodes(job)
        if job.status in (J.QUEUED, J.PREEMPTED, J.PLANNING):
            transition_job(job, J.STOPPED, reason)
            return job
        # A job that ran goes through stopping, also when none of its nodes is live any more (a running
        # job may not jump to stopped): then it is stopped at once.
        transition_job(job, J.STOPPING, reason)
        if not live:
            transition_job(job, J.STOPPED, reason)
            return job
        stop_nodes(live)
    return job


def job_preempt(*, job_id: int, reason: str, grace: float) -> bool:
    """Ask a running job to checkpoint and yield (lossless preemption, jobs/placement/queue.py chooses it):
    running -> preempting, and each live node's agent writes the request its ranks and supervisor
    watch (agent/runs.py request_preemption). Once no node runs it waits as `preempted`. False when
    the job is no longer running (the transition is conditional). Locks: the job (the caller holds
    the placement lock)."""
    job = Job.objects.select_for_update().filter(pk=job_id).first()
    if job is None or job.status != J.RUNNING:
        return False
    if not transition_job(job, J.PREEMPTING, f"{reason}; checkpointing and yielding (grace {grace:g} s)"):
        return False
    for node in live_nodes(job):
        if node.machine_id is None:
            continue
        kwargs = {"job_id": job.pk, "attempt": node.attempt, "node_rank": node.node_rank, "grace": grace,
                  "reason": reason}
        machine_id = node.machine_id
        transaction.on_commit(lambda kwargs=kwargs, machine_id=machine_id: celery_app.send_task(
            protocol.TASK_PREEMPT_NODE, kwargs=kwargs, queue=protocol.machine_queue(machine_id)))
    return True


def preempted_when_quiet(job: Job) -> None:
    """A preempting job whose last node ended waits in the queue again (or completed, when every node
    of the attempt finished first). Its next start is a new attempt from its last committed
    checkpoint, counting no restart."""
    if job.status != J.PREEMPTING or live_nodes(job):
        return
    if not job.nodes.filter(attempt=job.attempt).exclude(status=N.COMPLETED).exists():
        transition_job(job, J.COMPLETED, "every node exited 0 (it finished before yielding)")
        return
    yielded = job.nodes.filter(attempt=job.attempt, status_reason__contains="yielded for preemption").count()
    total = job.nodes.filter(attempt=job.attempt).count()
    how = "yielded after committing a checkpoint" if yielded == total else \
        f"stopped ({yielded} of {total} nodes yielded); it resumes from its last committed checkpoint"
    transition_job(job, J.PREEMPTED, f"{how}; waiting in the queue again ({job.status_reason.split(';')[0]})")


def job_delete(*, job: Job) -> None:
    """Delete a finished job with its nodes, events and records (a live one is stopped instead)."""
    with transaction.atomic():
        audit.record(None, audit.Action.JOB_DELETE, job, status=job.status)
        job.delete()


def finish_stopping_if_done(job: Job) -> None:
    if job.status == J.STOPPING and not live_nodes(job):
        transition_job(job, J.STOPPED, job.status_reason or "stopped")

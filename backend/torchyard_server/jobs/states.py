"""The job and node state machines: every transition is checked here and applied as a conditional
UPDATE, so two controller workers racing on the same row can never both win."""

from __future__ import annotations

from django.utils import timezone
from torchyard import protocol

from ..usage.services import usage_close, usage_open
from .events import publish_on_commit
from .memory_free import free_memory_on_commit
from .models import Job, JobNode
from .queue_poke import queue_poke_on_commit
from .registries import job_end_listeners

J = Job.Status
N = JobNode.Status

JOB_TRANSITIONS: dict[str, set[str]] = {
    J.QUEUED: {J.PLANNING, J.STOPPING, J.STOPPED, J.FAILED},
    J.PLANNING: {J.DISPATCHING, J.QUEUED, J.FAILED, J.STOPPING, J.STOPPED},
    J.DISPATCHING: {J.RUNNING, J.COMPLETED, J.RECOVERING, J.FAILED, J.STOPPING},
    J.RUNNING: {J.COMPLETED, J.RECOVERING, J.FAILED, J.STOPPING, J.PREEMPTING},
    J.RECOVERING: {J.DISPATCHING, J.QUEUED, J.FAILED, J.STOPPING},
    # Its ranks checkpoint and yield (or are stopped after preemption.grace); once no node of it runs
    # it waits in the queue as `preempted` (a job that finished meanwhile completes).
    J.PREEMPTING: {J.PREEMPTED, J.COMPLETED, J.FAILED, J.STOPPING},
    # Waits like `queued`, in the same order; its next start resumes from its last checkpoint as a
    # new attempt that counts no restart.
    J.PREEMPTED: {J.PLANNING, J.STOPPED, J.FAILED},
    J.STOPPING: {J.STOPPED},
    J.COMPLETED: set(),
    J.FAILED: set(),
    J.STOPPED: set(),
}
JOB_LIVE = frozenset(s for s, targets in JOB_TRANSITIONS.items() if targets)
JOB_FINAL = frozenset({J.COMPLETED, J.FAILED, J.STOPPED})
# What waits in the queue (jobs/placement/queue.py): a pass treats both alike, in one order.
JOB_WAITING = frozenset({J.QUEUED, J.PREEMPTED})
# A job holds its hot spares (its plan's) from its dispatch until it ends or waits queued again.
SPARES_HELD = frozenset({J.DISPATCHING, J.RUNNING, J.RECOVERING, J.PREEMPTING})

NODE_TRANSITIONS: dict[str, set[str]] = {
    N.PENDING: {N.LAUNCHING, N.STOPPED, N.FAILED, N.LOST},
    N.LAUNCHING: {N.PREPARING, N.RUNNING, N.COMPLETED, N.FAILED, N.LOST, N.STOPPED},
    N.PREPARING: {N.RUNNING, N.COMPLETED, N.FAILED, N.LOST, N.STOPPED},
    N.RUNNING: {N.COMPLETED, N.FAILED, N.LOST, N.STOPPED},
    N.COMPLETED: set(),
    N.FAILED: set(),
    N.LOST: set(),
    N.STOPPED: set(),
}
NODE_LIVE = frozenset(s for s, targets in NODE_TRANSITIONS.items() if targets)


class InvalidTransition(Exception):
    pass


def _sources(table: dict[str, set[str]], target: str) -> list[str]:
    return [src for src, targets in table.items() if target in targets]


def transition_job(job: Job, to: str, reason: str = "", **fields) -> bool:
    """Move `job` to `to` if its current status allows it. Emits a job `state` event on commit.

    Returns False (and changes nothing) when another worker moved the job first or the transition
    is not allowed from the status the row has now.
    """
    if to not in JOB_TRANSITIONS:
        raise InvalidTransition(f"unknown job status {to!r}")
    now = timezone.now()
    if to in JOB_FINAL:
        fields.setdefault("finished_at", now)
    if to == J.RUNNING:
        fields.setdefault("started_at", job.started_at or now)
    if to in JOB_WAITING:
        fields.setdefault("queued_at", now)
    previous = job.status
    updated = Job.objects.filter(pk=job.pk, status=previous, status__in=_sources(JOB_TRANSITIONS, to)).update(
        status=to, status_reason=reason, updated_at=now, **fields
    )
    if not updated:
        return False
    job.status, job.status_reason = to, reason
    for name, value in fields.items():
        setattr(job, name, value)
    if to in JOB_FINAL:
        free_memory_on_commit(job)
        job_end_listeners.notify(lambda listener: listener.job_ended(job.pk, to))
    if to in JOB_FINAL or (to == J.QUEUED and previous == J.RECOVERING) or to == J.PREEMPTED:
        # What it held is free (or it waits again): a queued job may start now.
        queue_poke_on_commit()
    publish_on_commit(
        {
            "type": protocol.STATE,
            "job": job.pk,
            "attempt": job.attempt,
            "scope": "job",
            "status": to,
            "previous": previous,
            "reason": reason,
        }
    )
    return True


def transition_node(node: JobNode, to: str, reason: str = "", *, announce: bool = True, **fields) -> bool:
    """Move `node` to `to` if allowed. `announce=False` when the event already exists (the
    supervisor's own report is persisted as the node's state event)."""
    if to not in NODE_TRANSITIONS:
        raise InvalidTransition(f"unknown node status {to!r}")
    now = timezone.now()
    if to not in NODE_LIVE:
        fields.setdefault("finished_at", now)
    if to == N.RUNNING:
        fields.setdefault("started_at", now)
    previous = node.status
    updated = JobNode.objects.filter(
        pk=node.pk, status=previous, status__in=_sources(NODE_TRANSITIONS, to)
    ).update(status=to, status_reason=reason, **fields)
    if not updated:
        return False
    node.status, node.status_reason = to, reason
    for name, value in fields.items():
        setattr(node, name, value)
    # The usage ledger (GPU-hours): what a node holds counts from running to its end.
    if to == N.RUNNING:
        _account_running(node)
    elif to not in NODE_LIVE:
        usage_close(node_id=node.pk, ended_at=fields["finished_at"])
    if announce:
        publish_on_commit(
            {
                "type": protocol.STATE,
                "job": node.job_id,
                "attempt": node.attempt,
                "node": node.pk,
                "node_rank": node.node_rank,
                "scope": "node",
                "status": to,
                "previous": previous,
                "reason": reason,
            }
        )
    return True


def _account_running(node: JobNode) -> None:
    job = Job.objects.filter(pk=node.job_id).values("owner_id", "owner__username", "project_id", "project__name").first()
    if job is None:
        return
    usage_open(node_id=node.pk, job_id=node.job_id, attempt=node.attempt, user_id=job["owner_id"],
               username=job["owner__username"], project_id=job["project_id"], project_name=job["project__name"],
               machine_id=node.machine_id, machine_name=node.machine_name, gpus=len(node.gpus or []),
               processes=node.nproc, started_at=node.started_at)

"""A queue pass (placement/queue.py decides, this does): start what may start, preempt for the head,
fail what can never run, write down why the others wait; the beat's chores around it."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework.exceptions import ValidationError
from torchyard import protocol

from ...audit import services as audit
from ...projects.priorities import priority_label
from ...usage.services import usage_close_many, usage_open_node_ids
from ..events import publish_on_commit
from ..intake.queue_fields import duration_text
from ..models import Job, JobNode
from ..placement.candidates import machine_candidates
from ..placement.planner import replacement_spares
from ..placement.queue import (
    HEAD,
    INVALID,
    RESOURCES,
    Decision,
    Holding,
    Snapshot,
    borrowing_jobs,
    evaluate,
    plan_nodes,
    preemption_reason,
    queue_entries,
    snapshot,
)
from ..queue_poke import queue_pass_started, queue_poke_on_commit
from ..registries import queue_changed
from ..spec import secretbox
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan
from ..states import JOB_FINAL, JOB_WAITING, NODE_LIVE, transition_job
from .admission import check_priority_ceiling
from .dispatch import dispatch, warm_spares
from .launch import open_secrets
from .lock import placement_lock
from .ports import pick_master_port
from .stop import job_preempt, job_stop

log = logging.getLogger(__name__)
J = Job.Status


# --- a pass -----------------------------------------------------------------------------------------
def queue_schedule() -> list[Decision]:
    """Start what may start, in queue order, and write down why the others wait. Locks: placement,
    then each job started (then its nodes, created)."""
    queue_pass_started()
    began = time.monotonic()
    with transaction.atomic():
        placement_lock()
        snap = snapshot()
        decisions = evaluate(snap.waiting, snap.machines, snap.holdings, snap.quotas, now=snap.now,
                             pick_port=pick_master_port)
        started = [d for d in decisions if d.start and _start(d)]
        for decision in decisions:
            if decision.victims:
                _preempt(decision, snap)
        for decision in decisions:
            if decision.blocked_by == INVALID:
                _fail(decision)
            elif not decision.start and decision.reason != decision.job.status_reason:
                # Conditional: a job stopped meanwhile keeps its own reason.
                Job.objects.filter(pk=decision.job.id, status__in=JOB_WAITING).update(status_reason=decision.reason)
        _mark_borrowing(snap, started)
        _replace_used_spares(decisions)
        still = [d for d in decisions if not d.start and d.blocked_by != INVALID]
        transaction.on_commit(lambda: queue_changed(queue_entries(still, renumber=True)))
    if decisions:
        log.log(logging.INFO if started else logging.DEBUG,
                "queue: %d queued, %d started (%d backfilled, %d borrowing) in %.1f ms", len(decisions), len(started),
                sum(d.backfill for d in started), sum(d.borrowing for d in started), (time.monotonic() - began) * 1000)
    return decisions


def _start(decision: Decision) -> bool:
    """Dispatch a job the pass chose, in a savepoint: one job that cannot go (stopped meanwhile, its
    secrets unreadable) does not undo the others."""
    assert decision.plan is not None
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=decision.job.id).first()
        if job is None or job.status not in JOB_WAITING or job.nodes.filter(status__in=NODE_LIVE).exists():
            return False
        resumed = job.status == J.PREEMPTED
        if not transition_job(job, J.PLANNING, decision.reason):
            return False
        try:
            open_secrets(JobSpec.from_json(job.spec))
        except secretbox.SecretUnreadable as exc:
            transition_job(job, J.FAILED, str(exc))
            return False
        if job.borrowing != decision.borrowing:
            Job.objects.filter(pk=job.pk).update(borrowing=decision.borrowing)
            job.borrowing = decision.borrowing
        dispatch(job, decision.plan, after_preemption=resumed)
    return True


def _fail(decision: Decision) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update().filter(pk=decision.job.id).first()
        if job is not None and job.status in JOB_WAITING:
            transition_job(job, J.FAILED, decision.reason)


def _preempt(decision: Decision, snap: Snapshot) -> list[int]:
    """Ask the victims the pass chose for the head to checkpoint and yield (under the placement lock:
    the next pass sees them preempting and chooses no more), and say on the head's timeline which."""
    head = decision.job
    machines = {m.id: m for m in snap.machines}
    preempted = [victim.job_id for victim in decision.victims if job_preempt(
        job_id=victim.job_id, grace=victim.grace,
        reason=preemption_reason(head, victim, machines, decision.need, snap.quotas))]
    if preempted:
        names = ", ".join(f"#{job_id}" for job_id in preempted)
        log.info("queue: #%s preempts %s", head.id, names)
        publish_on_commit({"type": protocol.STATE, "job": head.id, "scope": "job", "status": head.status,
                           "previous": head.status, "preempted": preempted,
                           "reason": f"preempting {names} to make room (they checkpoint and yield, then it starts)"})
    return preempted


def _replace_used_spares(decisions: list[Decision]) -> list[int]:
    """A live job that used a hot spare (it took a lost node's place) holds a new one, when a free
    machine fits and no queued job waits for room: a spare never makes a waiting job wait. Warmed as
    the job's first spares were, and said on its timeline. Returns the jobs given one."""
    if any(not d.start and d.blocked_by in (RESOURCES, HEAD) for d in decisions):
        return []
    short = [job_id for job_id, wanted, plan in Job.objects.filter(
        status__in=[J.DISPATCHING, J.RUNNING], spec__resources__spares__gt=0).values_list(
        "id", "spec__resources__spares", "plan") if len(Plan.from_json(plan).spares or []) < int(wanted)]
    given = []
    for job_id in short:
        job = Job.objects.select_for_update().filter(pk=job_id, status__in=[J.DISPATCHING, J.RUNNING]).first()
        if job is None or not job.plan:
            continue
        # Afresh for each job: the spares given to the one before are held now.
        spec = JobSpec.from_json(job.spec)
        plan = Plan.from_json(job.plan)
        more = replacement_spares(spec, plan, machine_candidates())
        if not more:
            continue
        plan.spares = [*(plan.spares or []), *more]
        Job.objects.filter(pk=job.pk).update(plan=plan.to_json())
        warm_spares(spec, Plan(spares=more))
        names = ", ".join(spare.machine_name for spare in more)
        publish_on_commit({"type": protocol.STATE, "job": job.pk, "attempt": job.attempt, "scope": "job",
                           "status": job.status, "previous": job.status, "spares": [x.machine_id for x in more],
                           "reason": f"holding {names} as a hot spare again, in place of the one it used "
                                     f"({len(plan.spares)} of {spec.resources.spares})"})
        given.append(job.pk)
    return given


def _mark_borrowing(snap: Snapshot, started: list[Decision]) -> None:
    """Keep every live job's `borrowing` true to what its project's quota leaves it now (a job that
    ended, a quota changed: the flags follow)."""
    holdings = list(snap.holdings) + [
        Holding(d.job.id, d.job.project_id, None, plan_nodes(d.plan or Plan()), order=1 << 62,
                borrowing=d.borrowing) for d in started]
    borrowing = borrowing_jobs(holdings, snap.quotas)
    for holding in holdings:
        if (holding.job_id in borrowing) != holding.borrowing:
            Job.objects.filter(pk=holding.job_id).update(borrowing=holding.job_id in borrowing)


def jobs_enforce_time_limits() -> list[int]:
    """Stop every job that has run past its time limit (from its start)."""
    now = timezone.now()
    stopped = []
    for job_id, limit, started in Job.objects.filter(
            status__in=[J.DISPATCHING, J.RUNNING], started_at__isnull=False, spec__has_key="time_limit").values_list(
            "id", "spec__time_limit", "started_at"):
        if isinstance(limit, (int, float)) and (now - started).total_seconds() >= limit:
            job_stop(job_id=job_id, reason=f"time limit of {duration_text(limit)} reached")
            stopped.append(job_id)
    return stopped


def usage_close_orphans() -> int:
    """Close the usage rows of nodes no longer live that no transition closed (their job deleted)."""
    open_ids = usage_open_node_ids()
    if not open_ids:
        return 0
    nodes = dict(JobNode.objects.filter(pk__in=open_ids).values_list("id", "status"))
    finished = dict(JobNode.objects.filter(pk__in=open_ids).values_list("id", "finished_at"))
    now = timezone.now()
    ends = {node_id: finished.get(node_id) or now for node_id in open_ids
            if node_id not in nodes or nodes[node_id] not in NODE_LIVE}
    return usage_close_many(ends=ends) if ends else 0


def queue_housekeeping() -> None:
    """The beat's chores around its pass: time limits, usage rows left open."""
    jobs_enforce_time_limits()
    usage_close_orphans()


# --- priorities ---------------------------------------------------------------------------------------
def job_set_priority(*, job: Job, priority: int, user: Any) -> Job:
    """Change a live job's priority (a queued one moves in the queue at once). Capped at its project's
    ceiling unless staff; audited with the previous one."""
    check_priority_ceiling(priority, job.project, user)
    with transaction.atomic():
        job = Job.objects.select_for_update().select_related("project").get(pk=job.pk)
        if job.status in JOB_FINAL:
            raise ValidationError({"priority": [f"job #{job.pk} is {job.status}: only a live job's priority changes."]})
        previous = job.priority
        if previous == priority:
            return job
        Job.objects.filter(pk=job.pk).update(priority=priority)
        job.priority = priority
        audit.record(None, audit.Action.JOB_PRIORITY_CHANGE, job, priority=priority, previous=previous,
                     status=job.status)
        # On the job's timeline, and (the ingest loop refreshes a job's summary on each state event)
        # on every dashboard's job list at once, not at the next change of state.
        who = getattr(user, "username", "") or "someone"
        publish_on_commit({"type": protocol.STATE, "job": job.pk, "attempt": job.attempt, "scope": "job",
                           "status": job.status, "previous": job.status, "priority": priority,
                           "previous_priority": previous,
                           "reason": f"priority changed from {priority_label(previous)} to {priority_label(priority)} "
                                     f"by {who}"})
        if job.status in JOB_WAITING:
            queue_poke_on_commit()
    log.info("job %s: priority %s -> %s", job.pk, priority_label(previous), priority_label(priority))
    return job


def job_schedule(*, job_id: int) -> None:
    """A queue pass for a job just queued: it starts when its turn in the queue (jobs/placement/queue.py) lets
    it (queued -> planning -> dispatching), or waits queued with its reason. The pass places every
    job whose turn it is, not only this one: no job jumps the queue by being scheduled by id."""
    if Job.objects.filter(pk=job_id, status=J.QUEUED).exists():
        queue_schedule()


def jobs_schedule_queued() -> None:
    """The beat's queue pass (jobs/placement/queue.py), after its chores: time limits, usage rows left open."""
    queue_housekeeping()
    queue_schedule()

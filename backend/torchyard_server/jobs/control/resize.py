"""Stopping a running attempt at a committed checkpoint to relaunch it in another shape: an elastic job
grown, a straggler replaced by a hot spare."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from django.db import transaction
from django.db.models import Min
from django.utils import timezone

from ..models import Job, JobNode
from ..placement.candidates import PlanError, machine_candidates
from ..placement.planner import plan_in_place, plan_job
from ..placement.quotas import growth_beyond_quota
from ..selectors import waiting_ahead_of
from ..spec.jobspec import JobSpec
from ..spec.plan import Plan
from ..states import transition_job
from .lock import placement_lock
from .nodes import live_nodes, stop_nodes
from .stragglers import describe, mark_replace, stragglers_to_replace

J, N = Job.Status, JobNode.Status


def job_grow_at_checkpoint(*, job_id: int, attempt: int) -> bool:
    """An elastic job below its most nodes committed a checkpoint (checkpoints.services calls this):
    when more machines fit it now and its attempt has run elastic.min_interval seconds, stop the
    attempt (without counting a restart) so that recovery relaunches it larger from that checkpoint.
    True when it asked."""
    stored = Job.objects.filter(pk=job_id, status=J.RUNNING, attempt=attempt).values_list("spec", flat=True).first()
    if stored is None or not JobSpec.from_json(stored).is_elastic:
        return False  # most jobs: no placement lock taken for their checkpoints
    with transaction.atomic():
        placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        spec = JobSpec.from_json(job.spec if job is not None else None)
        if job is None or job.status != J.RUNNING or job.attempt != attempt or not spec.is_elastic:
            return False
        current = Plan.from_json(job.plan).nnodes
        if not current or current >= spec.resources.most_nodes:
            return False
        interval = spec.resize_interval
        started = job.nodes.filter(attempt=attempt).aggregate(first=Min("created_at"))["first"]
        if started is None or started > timezone.now() - timedelta(seconds=interval):
            return False
        if waiting_ahead_of(job):
            return False  # the free machines are theirs first (its relaunch would wait behind them)
        try:
            # As if this job's own nodes were gone: they are stopped before the relaunch.
            larger = plan_job(spec, machine_candidates(exclude_job=job.pk), pick_port=lambda machine: 0)
        except PlanError:
            return False
        if larger.nnodes <= current:
            return False
        if growth_beyond_quota(job, larger):
            return False
        transition_job(job, J.RECOVERING, f"growing from {current} to {larger.nnodes} nodes: stopping attempt "
                       f"{attempt} at its committed checkpoint")
        stop_nodes(live_nodes(job))
    return True


def job_replace_stragglers_at_checkpoint(*, job_id: int, attempt: int) -> bool:
    """A job under `fault_tolerance.stragglers: replace` committed a checkpoint while a straggler
    waited for one (stragglers.py): stop the attempt (without counting a restart) so that recovery
    relaunches it from that checkpoint with a hot spare in the straggler's node's place. Only onto a
    spare: without one the straggler stays, and the job's stragglers say why. True when it asked."""
    stored = Job.objects.filter(pk=job_id, status=J.RUNNING, attempt=attempt).first()
    if stored is None or not stragglers_to_replace(stored):
        return False  # most jobs: no placement lock taken for their checkpoints
    with transaction.atomic():
        placement_lock()
        job = Job.objects.select_for_update().filter(pk=job_id).first()
        if job is None or job.status != J.RUNNING or job.attempt != attempt:
            return False
        waiting = stragglers_to_replace(job)
        if not waiting:
            return False
        spec, plan = JobSpec.from_json(job.spec), Plan.from_json(job.plan)
        leaving = {}
        for entry in waiting:
            node = plan.node(entry["node_rank"]) if entry["node_rank"] is not None else None
            if node is not None:
                leaving[str(node.machine_id)] = f"straggler: rank {entry['rank']}, {entry['ratio'] or '?'}x the median"
        planned = dataclasses.replace(plan, leaving=leaving)
        own = machine_candidates(exclude_job=job.pk)
        if plan_in_place(spec, planned, own, pick_port=lambda machine: 0) is None:
            mark_replace(job, [e["rank"] for e in waiting], "no hot spare to take its place: reported only")
            return False
        mark_replace(job, [e["rank"] for e in waiting], "replaced")
        transition_job(job, J.RECOVERING, "replacing " + "; ".join(describe(e) for e in waiting) +
                       f": stopping attempt {attempt} at its committed checkpoint", plan=planned.to_json())
        stop_nodes(live_nodes(job))
    return True

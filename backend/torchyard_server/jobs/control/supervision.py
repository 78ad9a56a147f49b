"""The beat's supervision sweep: what went quiet (no heartbeat, never started, a stop nobody
answered), and nodes on a machine being removed."""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from ...machines.models import Machine
from ...machines.services import MachineInUse, machine_mark_suspect
from ..models import Job, JobNode
from ..spec.jobspec import JobSpec
from ..states import JOB_FINAL, NODE_LIVE, transition_node
from .membership import membership_send
from .nodes import describe_node, live_nodes, stop_nodes
from .recovery import job_recover, node_lost_or_failed, restart_delay, winding_down

J, N = Job.Status, JobNode.Status


# --- supervision sweep (beat) ---------------------------------------------------------------------
def jobs_supervise() -> None:
    """Find what went quiet: nodes without heartbeats, nodes that never started, stops that
    nobody answered."""
    now = timezone.now()
    for node in JobNode.objects.filter(status__in=NODE_LIVE).select_related("job"):
        job = node.job
        spec = JobSpec.from_json(job.spec)
        timeout = float(spec.fault_tolerance.heartbeat_timeout)
        if node.status in (N.PREPARING, N.RUNNING) and node.last_heartbeat and node.last_heartbeat < now - timedelta(seconds=timeout):
            _mark_lost(node, f"{describe_node(node)} lost: no heartbeat for {timeout:.0f}s")
        elif node.status in (N.PENDING, N.LAUNCHING) and node.created_at < now - timedelta(
            seconds=settings.NODE_LAUNCH_TIMEOUT
        ):
            _mark_lost(node, f"{describe_node(node)} did not start within {settings.NODE_LAUNCH_TIMEOUT:.0f}s")
        elif job.status in (J.STOPPING, J.RECOVERING) and job.updated_at < now - timedelta(
            seconds=settings.STOP_TIMEOUT
        ):
            _mark_lost(node, f"{describe_node(node)} did not confirm the stop within {settings.STOP_TIMEOUT:.0f}s")
        elif job.status == J.PREEMPTING and job.updated_at < now - timedelta(
            # The supervisor stops it after the grace, or after a commit it waits for (one more grace).
            seconds=2 * spec.preemption_grace + settings.STOP_TIMEOUT
        ):
            _mark_lost(node, f"{describe_node(node)} did not yield nor stop after its preemption grace")
    _recover_stalled()


def _recover_stalled() -> None:
    """A recovery whose delayed task was lost (broker restart) is picked up here."""
    now = timezone.now()
    # Quiet for 10 s first: the job's spec (its restart_delay) is read only for those.
    for job in Job.objects.filter(status=J.RECOVERING, updated_at__lt=now - timedelta(seconds=10)):
        if job.updated_at < now - timedelta(seconds=restart_delay(job) + 10) and not live_nodes(job):
            job_recover(job_id=job.pk)


def _mark_lost(node: JobNode, reason: str) -> None:
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=node.job_id)
        node = JobNode.objects.select_for_update().get(pk=node.pk)
        if not transition_node(node, N.LOST, reason):
            return
        if node.machine_id is not None:
            machine_mark_suspect(machine_id=node.machine_id)
        if job.attempt == node.attempt:
            # The other nodes learn it is gone before any stop reaches them.
            membership_send(job_id=job.pk, attempt=node.attempt)
        # Make sure nothing of it keeps running should the agent still be there.
        stop_nodes([node])
        if not winding_down(job) and job.attempt == node.attempt and job.status not in JOB_FINAL:
            node_lost_or_failed(job, node, reason, last_lines=[])


def nodes_on_removed_machine(*, machine: Machine, force: bool) -> None:
    """A machine is about to be removed (machines.registries.machine_removals): refuse while nodes of
    live jobs run there, or with force declare them lost, which stops them and recovers their jobs."""
    live = list(JobNode.objects.filter(machine=machine, status__in=NODE_LIVE).select_related("job"))
    if not live:
        return
    if not force:
        jobs = sorted({node.job_id for node in live})
        raise MachineInUse(
            f"{machine.name} runs {len(live)} live node(s) of job(s) {', '.join(f'#{j}' for j in jobs)}; "
            "stop them first, or remove it with force (?force=true), which stops them and recovers the jobs elsewhere",
            [{"job": n.job_id, "node_rank": n.node_rank, "attempt": n.attempt, "status": n.status} for n in live],
        )
    for node in live:
        _mark_lost(node, f"{describe_node(node)} lost: its machine was removed")

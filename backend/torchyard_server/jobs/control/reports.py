"""What the nodes' supervisors report (via the ingest loop): state changes and heartbeats."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone
from torchyard import protocol
from torchyard.stream_contract import NodeStateEvent, RankError

from ..models import Job, JobNode
from ..spec.jobspec import JobSpec
from ..spec.progress import NodeProgress
from ..states import JOB_FINAL, NODE_LIVE, transition_job, transition_node
from .membership import membership_send
from .metrics import node_merge_progress
from .nodes import describe_node, live_nodes, stop_nodes
from .recovery import (
    NOT_RETRIED,
    is_ray,
    node_lost_or_failed,
    repeated_error,
    winding_down,
    without_node_rank,
)

J, N = Job.Status, JobNode.Status


def node_report_state(*, event: NodeStateEvent) -> None:
    """Apply a supervisor's state report. The report itself is already persisted as the node's
    state event, so the node transition is not announced again; job transitions are."""
    status = event.get("status")
    job_id = JobNode.objects.filter(pk=event.get("node")).values_list("job_id", flat=True).first()
    if job_id is None:
        return
    with transaction.atomic():
        # Lock order everywhere: the job, then its nodes (two orders deadlock exactly when nodes fail).
        job = Job.objects.select_for_update().get(pk=job_id)
        node = JobNode.objects.select_for_update().filter(pk=event.get("node")).first()
        if node is None:
            return
        if status == protocol.NODE_PREPARING:
            transition_node(node, N.PREPARING, str(event.get("reason") or "preparing"), announce=False,
                            last_heartbeat=timezone.now())
        elif status == protocol.NODE_RUNNING:
            if transition_node(node, N.RUNNING, "running", announce=False, pid=event.get("pid"),
                               last_heartbeat=timezone.now()) and job.attempt == node.attempt:
                membership_send(job_id=job.pk, attempt=node.attempt)
            if isinstance(ray := event.get("ray"), dict):
                # framework ray: the node's Ray ports (the head's dashboard port: GET /api/jobs/{id}/ray/).
                node_merge_progress(node.pk, NodeProgress(ray=ray))
            if job.attempt == node.attempt and job.status == J.DISPATCHING and not job.nodes.filter(
                attempt=node.attempt).exclude(status=N.RUNNING).exists():
                transition_job(job, J.RUNNING, f"all {job.world_size} ranks running")
        elif status == protocol.NODE_COMPLETED:
            warning = str(event.get("warning") or "")
            if transition_node(node, N.COMPLETED, f"exited 0{COMPLETED_WARNING}{warning}" if warning else "exited 0",
                               announce=False, exit_code=0) and job.attempt == node.attempt:
                # The nodes still running learn it: a rank that outlives every other one is ended (supervisor/linger.py).
                membership_send(job_id=job.pk, attempt=node.attempt)
            if is_ray(JobSpec.from_json(job.spec)) and node.node_rank == 0 and job.attempt == node.attempt and job.status not in JOB_FINAL \
                    and job.status not in (J.STOPPING, J.RECOVERING):
                # A Ray job is its driver on the head: done when it exits 0; the workers' raylets
                # block until stopped.
                stop_nodes([n for n in live_nodes(job) if n.pk != node.pk])
                transition_job(job, J.COMPLETED, "the Ray driver exited 0")
            elif not winding_down(job) and job.attempt == node.attempt and not job.nodes.filter(
                attempt=node.attempt).exclude(status=N.COMPLETED).exists():
                transition_job(job, J.COMPLETED, "every node exited 0" + _completion_warnings(job))
        elif status in (protocol.NODE_FAILED, protocol.NODE_STOPPED):
            failed = status == protocol.NODE_FAILED
            reason = str(event.get("reason") or ("failed" if failed else "stopped"))
            error: RankError | dict[str, object] = found if failed and isinstance(found := event.get("error"), dict) \
                else {}
            if transition_node(node, N.FAILED if failed else N.STOPPED, reason, announce=False,
                               exit_code=event.get("exit_code"), error=error) and job.attempt == node.attempt:
                # Queued before the stops node_lost_or_failed sends: the others learn first.
                membership_send(job_id=job.pk, attempt=node.attempt)
            fatal = failed and event.get("fatal") is True
            # node_lost_or_failed judges a repeat itself; here only a recovery another node started.
            repeated = (repeated_error(job, node) if failed and not fatal and job.status == J.RECOVERING
                        and job.attempt == node.attempt else None)
            if (fatal or repeated) and job.status == J.RECOVERING and job.attempt == node.attempt:
                # Another node's failure (its ranks saw this one's go away) started a recovery; this
                # node says a relaunch would fail the same way (the job's function raised, or the
                # same exception as the attempt before at the same step).
                transition_job(job, J.FAILED,
                               f"{describe_node(node)}: {without_node_rank(reason)}\n{repeated or NOT_RETRIED}")
            elif not winding_down(job) and job.attempt == node.attempt and job.status not in JOB_FINAL:
                detail = reason if failed else f"{describe_node(node)} stopped unexpectedly: {reason}"
                node_lost_or_failed(job, node, detail, last_lines=event.get("last_lines") or [], fatal=fatal)


# Between "exited 0" and the warning a node completed with, in its status reason.
COMPLETED_WARNING = "; warning: "


def _completion_warnings(job: Job) -> str:
    """The warnings the attempt's nodes completed with (a rank ended for outliving the job's work),
    for the job's own completion: "" when there were none."""
    reasons = job.nodes.filter(attempt=job.attempt, status_reason__contains=COMPLETED_WARNING).order_by("node_rank")
    return "".join(f"{COMPLETED_WARNING}{describe_node(node)}: {node.status_reason.split(COMPLETED_WARNING, 1)[1]}"
                   for node in reasons)


def node_record_heartbeats(*, beats: dict[int, float]) -> None:
    """Node liveness from supervisor heartbeats (last one per node in a batch)."""
    now = timezone.now()
    for node_id in beats:
        JobNode.objects.filter(pk=node_id, status__in=NODE_LIVE).update(last_heartbeat=now)

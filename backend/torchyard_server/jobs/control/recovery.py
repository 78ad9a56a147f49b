"""What happens when a node of the current attempt ends badly: recover from the last committed
checkpoint (with backoff, up to fault_tolerance.max_restarts) or fail the job."""

from __future__ import annotations

import logging
import re
from typing import Any

from django.db import transaction
from torchyard import protocol

from ...celery import app as celery_app
from ..models import Job, JobNode
from ..spec.jobspec import JobSpec
from ..states import JOB_FINAL, transition_job
from .dispatch import plan_and_dispatch
from .nodes import describe_node, live_nodes, stop_nodes
from .stalls import stall_verdict
from .stop import finish_stopping_if_done, preempted_when_quiet

log = logging.getLogger(__name__)
J, N = Job.Status, JobNode.Status


# A node says when a relaunch would fail the same way (its final state's `fatal`): the job's function
# raised, a volume is not shared, versions disagree.
NOT_RETRIED = "(not retried: a relaunch would fail the same way)"


def winding_down(job: Job) -> bool:
    """A node ended while the job was already stopping or recovering: once the last one is down,
    finish the stop or start the relaunch. False when the job is in neither state."""
    if job.status == J.STOPPING:
        finish_stopping_if_done(job)
        return True
    if job.status == J.RECOVERING:
        recover_when_quiet(job)
        return True
    if job.status == J.PREEMPTING:
        preempted_when_quiet(job)
        return True
    return False


def without_node_rank(reason: str) -> str:
    """A supervisor's reason without its "node rank N: " opening (the controller names the machine)."""
    return re.sub(r"^node rank \d+:\s*", "", reason)


def _quote(node: JobNode, line: Any) -> str:
    """One of a failed node's last lines; torchrun's own and the preparation's have no rank."""
    if not isinstance(line, dict):
        return str(line)
    who = f"rank {line['rank']}" if line.get("rank") is not None else f"node {node.node_rank}"
    return f"[{who}] {line.get('line')}"


def is_ray(spec: JobSpec) -> bool:
    return spec.distributed.launcher == "ray"


def node_lost_or_failed(job: Job, node: JobNode, reason: str, *, last_lines: list[Any], fatal: bool = False) -> None:
    """One node of the current attempt ended badly: stop the others, then either recover (relaunch
    every node from the last committed checkpoint, up to fault_tolerance.max_restarts times) or
    fail the job with the reason. A `fatal` failure (the node says retrying cannot help: the job's
    function raised, a volume is not shared) fails the job at once."""
    tail = "\n".join(_quote(node, line) for line in last_lines[-protocol.FAILURE_LOG_LINES :])
    # The supervisor says "node rank N: ..."; name the machine too, once.
    reason = without_node_rank(reason)
    full_reason = reason if reason.startswith(describe_node(node)) else f"{describe_node(node)}: {reason}"
    if verdict := stall_verdict(job, node.attempt):
        # The rank that held the others, where the stall view has named it (jobs/control/stalls.py).
        full_reason += f"\nstall verdict: {verdict}"
    if tail:
        full_reason += "\nlast log lines:\n" + tail
    others = [n for n in live_nodes(job) if n.pk != node.pk]
    spec = JobSpec.from_json(job.spec)
    if (not fatal and is_ray(spec) and node.node_rank != 0 and job.status not in JOB_FINAL
            and spec.fault_tolerance.ray_worker_loss == "tolerate"
            and any(n.node_rank == 0 for n in others)):
        # fault_tolerance.ray_worker_loss: tolerate: the driver handles a lost Ray worker itself.
        log.warning("job %s: %s; the Ray job goes on (ray_worker_loss: tolerate)", job.pk, full_reason)
        return
    stop_nodes(others)
    max_restarts = int(spec.fault_tolerance.max_restarts)
    if not fatal and (repeated := repeated_error(job, node)):
        transition_job(job, J.FAILED, f"{full_reason}\n{repeated}")
        return
    if not fatal and job.status in (J.DISPATCHING, J.RUNNING) and job.restarts < max_restarts:
        transition_job(job, J.RECOVERING, f"restart {job.restarts + 1} of {max_restarts} after {full_reason}",
                       restarts=job.restarts + 1)
        recover_when_quiet(job)
    else:
        if fatal:
            full_reason += f"\n{NOT_RETRIED}"
        elif max_restarts:
            full_reason += f"\n(gave up after {max_restarts} restart{'s' if max_restarts != 1 else ''})"
        transition_job(job, J.FAILED, full_reason)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """One error, twice: the same exception type and message, raised from the same frame of the
    user's code, at the same step (None: before the rank's first step)."""
    return all(a.get(key) == b.get(key) for key in ("type", "message", "frame", "step"))


def repeated_error(job: Job, node: JobNode) -> str | None:
    """Why the job must not be retried when `node` failed with a Python exception that the attempts
    just before this one failed with too (fault_tolerance.retry_same_error times already), or None.
    A fault of the cluster (a lost machine, a process killed, an OOM kill, a hang) has no exception:
    it is retried up to max_restarts like before."""
    error = node.error or {}
    if not error.get("type"):
        return None
    allowed = int(JobSpec.from_json(job.spec).fault_tolerance.retry_same_error)
    times = 1
    for attempt in range(node.attempt - 1, -1, -1):
        before = [e for e in JobNode.objects.filter(job_id=job.pk, attempt=attempt).exclude(error={})
                  .values_list("error", flat=True) if isinstance(e, dict)]
        if not any(_same(error, e) for e in before):
            break
        times += 1
    if times <= allowed:
        return None
    step = error.get("step")
    # A script that reports no steps (no torchyard.sdk.report) has none to name.
    where = f" at step {step}" if step is not None else ""
    what = f"{error['type']}: {error.get('message') or ''}".rstrip(": ")
    if times == 1:
        return (f"{what}{where}: not retried (fault_tolerance.retry_same_error is 0: a raised exception fails "
                "the job at once)")
    count = "twice" if times == 2 else f"{times} times"
    return (f"the same error {count}{where}: not retried ({what}, raised at {error.get('frame') or '?'}; "
            "fault_tolerance.retry_same_error)")


def jobs_interrupt(*, reason: str) -> list[int]:
    """Torchyard itself is stopping (embedded mode's Ctrl-C ends training with it): live jobs go to
    `recovering` without using a restart, and resume from their last checkpoint on the next start."""
    interrupted = []
    for job_id in Job.objects.filter(status__in=[J.DISPATCHING, J.RUNNING]).values_list("pk", flat=True):
        with transaction.atomic():
            job = Job.objects.select_for_update().get(pk=job_id)
            if transition_job(job, J.RECOVERING, reason):
                interrupted.append(job_id)
    return interrupted


MAX_RESTART_DELAY = 60.0


def recovery_delay(restarts: int, first: float = 0.0) -> float:
    """Backoff before the restart numbered `restarts` (1 is the first): `first` seconds (the job's
    fault_tolerance.restart_delay), doubling for each next restart, at most 60 s. With `first` 0 the
    first restart goes at once (a single failure says nothing about the next try), then 2 s, 4 s ..."""
    if restarts <= 1:
        return min(first, MAX_RESTART_DELAY)
    return min(MAX_RESTART_DELAY, (first or 1.0) * 2.0 ** (restarts - 1))


def restart_delay(job: Job) -> float:
    return recovery_delay(job.restarts, JobSpec.from_json(job.spec).fault_tolerance.restart_delay)


def recover_when_quiet(job: Job) -> None:
    """Relaunch once no node of the failed attempt runs any more (each report re-checks)."""
    if job.status == J.RECOVERING and not live_nodes(job):
        delay = restart_delay(job)
        transaction.on_commit(lambda: celery_app.send_task(
            "torchyard_server.jobs.tasks.recover_job", args=(job.pk,), queue=protocol.CONTROL_QUEUE, countdown=delay))


def job_recover(*, job_id: int) -> None:
    """recovering -> dispatching with the next attempt, or queued when the machines are not there."""
    plan_and_dispatch(job_id=job_id, from_status=J.RECOVERING, prefix="recovery: ")

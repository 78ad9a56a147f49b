"""Who of a job's current attempt is up: what each node's SDK learns through its agent
(`sdk.peers()`, `sdk.on_membership_change()`), never by asking the server itself.

Whenever a node of the current attempt starts running or ends, every live node of the attempt is
sent the new membership (`protocol.TASK_UPDATE_PEERS`, on commit, to its machine's queue); its
agent writes it as `peers.json` into the node's run directory."""

from __future__ import annotations

from django.db import transaction
from torchyard import protocol

from ...celery import app as celery_app
from ..models import JobNode
from ..states import NODE_LIVE

N = JobNode.Status
# A node's part in the version: it only ever moves up (not yet running, running, ended), so the
# sum over the attempt's nodes grows with every change and a late message never undoes a newer one.
_LEVEL: dict[str, int] = {N.RUNNING: 1, N.COMPLETED: 2, N.FAILED: 2, N.LOST: 2, N.STOPPED: 2}


def job_membership(job_id: int, attempt: int) -> protocol.Membership:
    """The membership of one attempt, its nodes in node order."""
    nodes = list(JobNode.objects.filter(job_id=job_id, attempt=attempt).order_by("node_rank"))
    return {
        "version": sum(_LEVEL.get(node.status, 0) for node in nodes),
        "nodes": [{"node_rank": node.node_rank, "host": node.host, "machine": node.machine_name,
                   "status": node.status} for node in nodes],
    }


def membership_send(*, job_id: int, attempt: int) -> None:
    """Queue the attempt's membership, as it is in this transaction, to every live node's machine
    (on commit, in the order of the caller's other messages: before the stops that may follow)."""
    membership = job_membership(job_id, attempt)
    targets = JobNode.objects.filter(job_id=job_id, attempt=attempt, status__in=NODE_LIVE, machine__isnull=False)
    for node_rank, machine_id in targets.values_list("node_rank", "machine_id"):
        kwargs = {"job_id": job_id, "attempt": attempt, "node_rank": node_rank, "membership": membership}
        transaction.on_commit(
            lambda kwargs=kwargs, machine_id=machine_id: celery_app.send_task(
                protocol.TASK_UPDATE_PEERS, kwargs=kwargs, queue=protocol.machine_queue(machine_id)))

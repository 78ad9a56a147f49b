"""A job's live nodes, and asking their agents to stop them."""

from __future__ import annotations

from django.db import transaction
from torchyard import protocol

from ...celery import app as celery_app
from ..models import Job, JobNode
from ..states import NODE_LIVE


# --- stopping -------------------------------------------------------------------------------------
def stop_nodes(nodes: list[JobNode]) -> None:
    for node in nodes:
        if node.machine_id is None:
            continue
        kwargs = {"job_id": node.job_id, "attempt": node.attempt, "node_rank": node.node_rank, "node_id": node.pk}
        machine_id = node.machine_id
        transaction.on_commit(
            lambda kwargs=kwargs, machine_id=machine_id: celery_app.send_task(
                protocol.TASK_STOP_NODE, kwargs=kwargs, queue=protocol.machine_queue(machine_id)
            )
        )


def live_nodes(job: Job) -> list[JobNode]:
    return list(job.nodes.filter(status__in=NODE_LIVE))


# --- what the nodes report (via the ingest loop) --------------------------------------------------
def describe_node(node: JobNode) -> str:
    return f"node {node.node_rank} ({node.machine_name})"

"""`torchyard stacks JOB` (and the job page's Stacks button): where every rank of a running job is,
asked of each running node's agent, which reads its ranks' Python stacks from outside (py-spy,
workers/torchyard/agent/stacks.py) and publishes them as one `stacks` event per node. The events are
the job's like any other: the stream and GET /api/jobs/{id}/events?type=stacks carry them, and
`request` tells one asking from the next."""

from __future__ import annotations

import uuid

from django.db import transaction
from torchyard import protocol

from ...celery import app as celery_app
from ..models import Job, JobNode


class NothingRunning(Exception):
    """No node of the job's current attempt runs: there are no stacks to read."""


def job_request_stacks(*, job: Job) -> protocol.StacksRequested:
    """Ask every running node of the job's current attempt for its ranks' stacks."""
    nodes = list(JobNode.objects.filter(job_id=job.pk, attempt=job.attempt, status=JobNode.Status.RUNNING,
                                        machine__isnull=False).order_by("node_rank"))
    if not nodes:
        raise NothingRunning(f"job {job.pk} is {job.status}: no node of attempt {job.attempt} is running")
    request = uuid.uuid4().hex

    def send() -> None:
        for node in nodes:
            celery_app.send_task(protocol.TASK_DUMP_STACKS, queue=protocol.machine_queue(node.machine_id), kwargs={
                "job_id": job.pk, "attempt": job.attempt, "node_rank": node.node_rank, "node_id": node.pk,
                "request": request})

    transaction.on_commit(send)
    return {"request": request, "nodes": [{"node_rank": n.node_rank, "machine": n.machine_name} for n in nodes]}

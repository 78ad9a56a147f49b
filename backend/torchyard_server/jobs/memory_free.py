"""Freeing a job's memory checkpoints (checkpointing.memory) when it ends: each machine that ran one of
its nodes is told to drop what its agent holds for the job (protocol.TASK_FREE_MEMORY). A machine that
is down gets the task when its agent comes back (and an agent that restarted holds nothing anyway)."""

from __future__ import annotations

from django.db import transaction
from torchyard import protocol

from ..celery import app as celery_app
from .models import Job


def free_memory_on_commit(job: Job) -> None:
    if not ((job.spec or {}).get("checkpointing") or {}).get("memory"):
        return
    machine_ids = sorted({m for m in job.nodes.values_list("machine_id", flat=True) if m is not None})

    def send() -> None:
        for machine_id in machine_ids:
            celery_app.send_task(protocol.TASK_FREE_MEMORY, kwargs={"job_id": job.pk},
                                 queue=protocol.machine_queue(machine_id))

    transaction.on_commit(send)

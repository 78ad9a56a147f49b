"""Controller tasks (queue "control"). Each takes ids, returns quietly when the row is gone and
calls one service; each is idempotent because every service transition is conditional."""

from __future__ import annotations

from celery import shared_task

from ..machines.services import machine_mark_stale_offline
from . import services


@shared_task(name="torchyard_server.jobs.tasks.schedule_job")
def schedule_job(job_id: int) -> None:
    services.job_schedule(job_id=job_id)


@shared_task(name="torchyard_server.jobs.tasks.schedule_queued")
def schedule_queued() -> None:
    services.jobs_schedule_queued()


@shared_task(name="torchyard_server.jobs.tasks.supervise")
def supervise() -> None:
    machine_mark_stale_offline()
    services.jobs_supervise()


@shared_task(name="torchyard_server.jobs.tasks.recover_job")
def recover_job(job_id: int) -> None:
    services.job_recover(job_id=job_id)

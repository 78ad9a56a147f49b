"""Controller tasks (queue "control"). Each takes ids, returns quietly when the row is gone and
calls one service; each is idempotent because every service transition is conditional."""

from __future__ import annotations

from celery import shared_task

from ..machines.services import machine_mark_stale_offline
from .control.queue_pass import job_schedule, jobs_schedule_queued
from .control.recovery import job_recover
from .control.supervision import jobs_supervise


@shared_task(name="torchyard_server.jobs.tasks.schedule_job")
def schedule_job(job_id: int) -> None:
    job_schedule(job_id=job_id)


@shared_task(name="torchyard_server.jobs.tasks.schedule_queued")
def schedule_queued() -> None:
    jobs_schedule_queued()


@shared_task(name="torchyard_server.jobs.tasks.supervise")
def supervise() -> None:
    machine_mark_stale_offline()
    jobs_supervise()


@shared_task(name="torchyard_server.jobs.tasks.recover_job")
def recover_job(job_id: int) -> None:
    job_recover(job_id=job_id)

"""The sweeps' Celery tasks: one sweep moved on (a trial's job ended, an API action), and the beat's
tick, which moves every running sweep on (what its trials reported reaches the pruner within it)."""

from __future__ import annotations

from celery import shared_task

from .models import Sweep
from .services import sweep_advance


@shared_task(name="torchyard_server.sweeps.tasks.advance_sweep", ignore_result=True)
def advance_sweep(sweep_id: int) -> None:
    sweep_advance(sweep_id)


@shared_task(name="torchyard_server.sweeps.tasks.tick_sweeps", ignore_result=True)
def tick_sweeps() -> None:
    for sweep_id in Sweep.objects.filter(status__in=[Sweep.Status.RUNNING, Sweep.Status.STOPPING]).values_list(
            "pk", flat=True):
        sweep_advance(sweep_id)

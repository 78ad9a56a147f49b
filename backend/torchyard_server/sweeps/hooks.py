"""What the sweeps app answers through the jobs app's registries; registered in apps.py."""

from __future__ import annotations

from django.db import transaction

from ..jobs.registries import JobEndListener
from .models import Trial


class TrialEnded(JobEndListener):
    """A trial's job ended: its sweep moves on (tells the searcher, asks the next trial) at once."""

    type = "sweeps"

    def job_ended(self, job_id: int, status: str) -> None:
        sweep_id = Trial.objects.filter(job_id=job_id).values_list("sweep_id", flat=True).first()
        if sweep_id is not None:
            from .tasks import advance_sweep

            transaction.on_commit(lambda: advance_sweep.delay(sweep_id))

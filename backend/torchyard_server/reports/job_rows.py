"""The rows that go with each job (deleted with it, on_delete=CASCADE), counted per kind as a purge
answers them."""

from __future__ import annotations

from django.db.models import Count, Model

from ..artifacts.models import Artifact
from ..checkpoints.models import CheckpointManifest
from ..jobs.models import JobNode
from ..streaming.models import JobEvent

COUNTED: dict[str, type[Model]] = {
    "nodes": JobNode,
    "events": JobEvent,
    "checkpoints": CheckpointManifest,
    "artifacts": Artifact,
}


def job_row_counts(job_ids: list[int]) -> dict[int, dict[str, int]]:
    counts: dict[int, dict[str, int]] = {pk: dict.fromkeys(COUNTED, 0) for pk in job_ids}
    for name, model in COUNTED.items():
        rows = (
            model._default_manager.filter(job_id__in=job_ids)
            .values("job_id")
            .order_by("job_id")
            .annotate(n=Count("pk"))
        )
        for row in rows:
            counts[row["job_id"]][name] = row["n"]
    return counts

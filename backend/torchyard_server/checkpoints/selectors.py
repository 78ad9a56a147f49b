from __future__ import annotations

from django.db.models import Max

from .models import CheckpointManifest


def checkpoint_list(*, job_id: int):
    return CheckpointManifest.objects.filter(job_id=job_id, deleted=False).order_by("-step")


def latest_good_manifest_uri(*, job_id: int) -> str:
    """The newest committed, not-known-corrupt manifest; the SDK verifies hashes again on load."""
    row = checkpoint_list(job_id=job_id).filter(verified=True).first()
    return row.uri if row else ""


def last_committed_at(*, job_ids: list[int]) -> dict[int, float]:
    """When each job last committed a checkpoint (epoch seconds); jobs without one are left out."""
    rows = CheckpointManifest.objects.filter(job_id__in=job_ids).values("job_id").annotate(last=Max("committed_at"))
    return {row["job_id"]: row["last"].timestamp() for row in rows if row["last"] is not None}

from __future__ import annotations

from .models import CheckpointManifest


def checkpoint_list(*, job_id: int):
    return CheckpointManifest.objects.filter(job_id=job_id, deleted=False).order_by("-step")


def latest_good_manifest_uri(*, job_id: int) -> str:
    """The newest committed, not-known-corrupt manifest; the SDK verifies hashes again on load."""
    row = checkpoint_list(job_id=job_id).filter(verified=True).first()
    return row.uri if row else ""

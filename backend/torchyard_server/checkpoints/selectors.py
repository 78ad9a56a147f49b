from __future__ import annotations

from typing import Any

from django.db.models import Max

from ..machines.models import Machine
from .models import CheckpointManifest

# A machine whose agent may still hold memory checkpoints: not gone quiet (offline, a lost node made
# it suspect) and not yet registered.
_HOLDERS_GONE = (Machine.Status.OFFLINE, Machine.Status.PENDING)
# How far back a recovery looks for a checkpoint that survives.
_LOOK_BACK = 50


def _living_machines() -> set[str]:
    return set(Machine.objects.exclude(status__in=_HOLDERS_GONE).values_list("name", flat=True))


def checkpoint_list(*, job_id: int):
    return CheckpointManifest.objects.filter(job_id=job_id, deleted=False).order_by("-step")


def _living_holders(row: CheckpointManifest, alive: set[str]) -> list[str] | None:
    """The machines still holding every file of a memory checkpoint (None when a file has none)."""
    holders: list[str] | None = None
    for entry in row.files or []:
        names = [str(h) for h in (entry.get("holders") or []) if str(h) in alive]
        if not names:
            return None
        holders = names if holders is None else [h for h in holders if h in names]
    return holders


def latest_good_manifest_uri(*, job_id: int) -> str:
    """The newest committed, not-known-corrupt checkpoint that survives: a disk/S3 one, or a memory one
    that a machine still online holds; the SDK verifies hashes again on load (and falls back to the
    store's newest when a memory copy cannot be read after all)."""
    alive: set[str] | None = None
    for row in checkpoint_list(job_id=job_id).filter(verified=True)[:_LOOK_BACK]:
        if row.tier != CheckpointManifest.Tier.MEMORY:
            return row.uri
        if alive is None:
            alive = _living_machines()
        if _living_holders(row, alive):
            return row.uri
    return ""


def memory_resume(*, job_id: int, uri: str) -> tuple[dict[str, Any], list[str]] | None:
    """A memory checkpoint's manifest and the living machines that hold all of it; None when it is
    not a memory checkpoint of the job or none of its holders lives."""
    row = CheckpointManifest.objects.filter(job_id=job_id, uri=uri, tier=CheckpointManifest.Tier.MEMORY).first()
    if row is None:
        return None
    holders = _living_holders(row, _living_machines())
    return (dict(row.manifest), holders) if holders else None


def last_committed_at(*, job_ids: list[int]) -> dict[int, float]:
    """When each job last committed a checkpoint (epoch seconds); jobs without one are left out."""
    rows = CheckpointManifest.objects.filter(job_id__in=job_ids).values("job_id").annotate(last=Max("committed_at"))
    return {row["job_id"]: row["last"].timestamp() for row in rows if row["last"] is not None}

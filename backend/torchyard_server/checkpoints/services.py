from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django.utils import timezone
from django.utils.dateparse import parse_datetime
from torchyard.stream_contract import CheckpointEvent

from ..jobs.control.resize import job_grow_at_checkpoint, job_replace_stragglers_at_checkpoint
from ..jobs.models import Job
from ..jobs.spec.jobspec import JobSpec
from .models import CheckpointManifest

# The memory checkpoints of a job an agent keeps (torchyard.agent.memory.KEEP_STEPS).
MEMORY_KEEP = 2


def checkpoint_record(*, event: CheckpointEvent) -> CheckpointManifest | None:
    """Record a manifest the SDK committed (its `checkpoint` event). Idempotent by (job, uri)."""
    job_id, uri = event.get("job"), event.get("uri")
    # Read defensively: the job's own SDK wrote it, of whatever version (older manifests lack fields).
    found = event.get("manifest")
    manifest: Mapping[str, Any] = found if isinstance(found, dict) else {}
    job = Job.objects.filter(pk=job_id).first()
    if not uri or job is None:
        return None
    files = manifest.get("files") or []
    created = manifest.get("created_at")
    committed_at = timezone.now()
    if isinstance(created, (int, float)):
        committed_at = dt.datetime.fromtimestamp(created, tz=dt.UTC)
    elif isinstance(created, str):
        committed_at = parse_datetime(created) or committed_at
    # What the save cost the training loop (the SDK's manifest "save" section; absent from older ones).
    timing = manifest.get("save")
    if not isinstance(timing, dict):
        timing = {}
    row, _ = CheckpointManifest.objects.update_or_create(
        job_id=job_id,
        uri=uri,
        defaults={
            "step": int(event.get("step") or manifest.get("step") or 0),
            "tier": CheckpointManifest.Tier.MEMORY if manifest.get("tier") == "memory" else CheckpointManifest.Tier.DISK,
            "attempt": int(manifest.get("attempt") or event.get("attempt") or 0),
            "world_size": manifest.get("world_size"),
            "files": files,
            "total_bytes": int(manifest.get("total_bytes") or sum(int(f.get("size") or 0) for f in files)),
            "manifest": manifest,
            "committed_at": committed_at,
            "saved_async": timing.get("async") is True,
            "blocking_seconds": _seconds(timing.get("blocking_seconds")),
            "background_seconds": _seconds(timing.get("background_seconds")),
        },
    )
    # Retention happens where the files are, after each commit: the SDK keeps the newest `keep` in the
    # store, an agent the newest MEMORY_KEEP of a job in memory. Mirrored here so the list shows what exists.
    keep = MEMORY_KEEP if row.tier == CheckpointManifest.Tier.MEMORY else JobSpec.from_json(job.spec).checkpointing.keep
    if isinstance(keep, int) and keep > 0:
        stale = CheckpointManifest.objects.filter(job_id=job_id, tier=row.tier, deleted=False).order_by("-step")[keep:]
        CheckpointManifest.objects.filter(pk__in=[r.pk for r in stale]).update(deleted=True)
    if isinstance(event.get("attempt"), int):
        # An elastic job below its most nodes grows at a committed checkpoint when machines allow.
        job_grow_at_checkpoint(job_id=job.pk, attempt=event["attempt"])
        # A straggler waiting to be replaced (fault_tolerance.stragglers: replace) goes now.
        job_replace_stragglers_at_checkpoint(job_id=job.pk, attempt=event["attempt"])
    return row


def _seconds(value: Any) -> float | None:
    """A duration the SDK wrote, or None when it is missing or not a finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if 0 <= value < float("inf") else None

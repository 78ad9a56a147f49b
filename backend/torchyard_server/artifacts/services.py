from __future__ import annotations

import math
import posixpath
from datetime import UTC, datetime
from typing import Any

from torchyard.stream_contract import ArtifactEvent, ResultEvent

from ..checkpoints.storage import OutsideJobStore, storage_for
from ..jobs.models import Job, JobNode
from .models import Artifact, FunctionResult


def artifacts_record(*, event: ArtifactEvent) -> list[Artifact]:
    """Record the files a node collected (its `artifact` event). Idempotent by (job, attempt, node, path).

    Each URI must lie in the job's own folder of the store; anything else is dropped, since the event
    passed through a training script's machine."""
    job_id = int(event.get("job") or 0)
    if not Job.objects.filter(pk=job_id).exists():
        return []
    attempt, node_rank = int(event.get("attempt") or 0), int(event.get("node_rank") or 0)
    recorded = []
    for entry in event.get("files") or []:
        try:
            path = posixpath.normpath(str(entry["path"]))
            uri = str(entry["uri"])
            storage_for(uri, job_id)
            size, sha256 = int(entry["size"]), str(entry["sha256"])
        except (KeyError, TypeError, ValueError, OutsideJobStore):
            continue
        if path.startswith(("/", "..")):
            continue
        row, _ = Artifact.objects.update_or_create(
            job_id=job_id, attempt=attempt, node_rank=node_rank, path=path,
            defaults={"size": size, "sha256": sha256[:64], "uri": uri},
        )
        recorded.append(row)
    return recorded


def function_result_record(*, event: ResultEvent) -> FunctionResult | None:
    """Record one rank's result (its node's `result` event). Idempotent by (job, attempt, rank).

    A pickle's URI must lie in the job's own folder of the store (the event passed through a
    training machine); one elsewhere is kept as text only (no value to hand out)."""
    job_id = int(event.get("job") or 0)
    rank = event.get("rank")
    if not isinstance(rank, int):
        return None
    attempt, node_rank = int(event.get("attempt") or 0), int(event.get("node_rank") or 0)
    if rank < 0 or not Job.objects.filter(pk=job_id).exists():
        return None
    uri = str(event.get("uri") or "")
    if uri:
        try:
            storage_for(uri, job_id)
        except (OutsideJobStore, ValueError):
            uri = ""
    node = JobNode.objects.filter(job_id=job_id, attempt=attempt, node_rank=node_rank).first()
    ok = bool(event.get("ok"))
    error_type, error = event.get("error_type"), event.get("error")
    if ok and not uri:
        error_type, error = "ResultLost", "the rank returned, but its value was not stored in the job's store"
    row, _ = FunctionResult.objects.update_or_create(
        job_id=job_id, attempt=attempt, rank=rank,
        defaults={
            "node_rank": node_rank, "machine_name": node.machine_name if node else "",
            "ok": ok and bool(uri), "size": int(event.get("size") or 0) if uri else 0,
            "sha256": str(event.get("sha256") or "")[:64], "uri": uri,
            "repr": str(event.get("repr") or "")[:4000], "error_type": str(error_type or "")[:200],
            "error": str(error or "")[:4000], "traceback": str(event.get("traceback") or "")[:40000],
            "raised_at": _when(event.get("raised_at")), "peer_failure": event.get("peer_failure") is True,
        },
    )
    return row


def _when(value: Any) -> datetime | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    try:
        return datetime.fromtimestamp(value, tz=UTC)
    except (OverflowError, OSError, ValueError):
        return None

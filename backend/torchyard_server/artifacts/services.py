from __future__ import annotations

import posixpath
from typing import Any

from ..checkpoints.storage import OutsideJobStore, storage_for
from ..jobs.models import Job
from .models import Artifact


def artifacts_record(*, event: dict[str, Any]) -> list[Artifact]:
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

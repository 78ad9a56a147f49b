"""What the checkpoints app answers through the jobs app's registries; registered in apps.py."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torchyard import protocol
from torchyard.stream_contract import AppliedEvent

from ..jobs.registries import CheckpointTimes, EventApplier, ResumeLookup
from .selectors import last_committed_at, latest_good_manifest_uri, memory_resume
from .services import checkpoint_record


class NewestGoodManifest(ResumeLookup):
    """A recovered job's next attempt resumes from the newest good manifest."""

    type = "checkpoints"

    def manifest_uri(self, job_id: int) -> str:
        return latest_good_manifest_uri(job_id=job_id)

    def memory_resume(self, job_id: int, uri: str) -> tuple[dict[str, Any], list[str]] | None:
        return memory_resume(job_id=job_id, uri=uri)


class LastCommits(CheckpointTimes):
    """Preemption chooses the victim that loses the least work: the least time since a commit."""

    type = "checkpoints"

    def last_committed(self, job_ids: list[int]) -> dict[int, float]:
        return last_committed_at(job_ids=job_ids)


class CheckpointApplier(EventApplier):
    type = protocol.CHECKPOINT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] == protocol.CHECKPOINT:
                checkpoint_record(event=event)

"""What the artifacts app answers through the jobs app's registries; registered in apps.py."""

from __future__ import annotations

from collections.abc import Sequence

from torchyard import protocol

from ..jobs.registries import AppliedEvent, EventApplier
from .services import artifacts_record, function_result_record


class ArtifactApplier(EventApplier):
    type = protocol.ARTIFACT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for event in events:
            artifacts_record(
                event={
                    **event.payload,
                    "job": event.job_id,
                    "attempt": event.attempt,
                    "node_rank": event.node_rank,
                }
            )


class FunctionResultApplier(EventApplier):
    type = protocol.RESULT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for event in events:
            function_result_record(
                event={
                    **event.payload,
                    "job": event.job_id,
                    "attempt": event.attempt,
                    "node_rank": event.node_rank,
                    "rank": event.rank,
                }
            )

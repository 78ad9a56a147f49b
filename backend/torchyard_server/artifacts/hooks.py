"""What the artifacts app answers through the jobs app's registries; registered in apps.py."""

from __future__ import annotations

from collections.abc import Sequence

from torchyard import protocol
from torchyard.stream_contract import AppliedEvent

from ..jobs.registries import EventApplier
from .services import artifacts_record, function_result_record


class ArtifactApplier(EventApplier):
    type = protocol.ARTIFACT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] == protocol.ARTIFACT:
                artifacts_record(event=event)


class FunctionResultApplier(EventApplier):
    type = protocol.RESULT

    def apply(self, events: Sequence[AppliedEvent]) -> None:
        for row in events:
            event = row.event()
            if event["type"] == protocol.RESULT:
                function_result_record(event=event)

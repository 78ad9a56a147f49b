"""checkpointing.every_n_steps as the API reads and writes it: a number of steps, or "auto" (the
interval chosen for the job from what a save costs it and how often its machines fail: Young/Daly,
torchyard.sdk.checkpoint.cadence).

Its own module: the JobSpec's value (jobspec.py) and its intake (intake/sections.py) both use it, and
neither may import the other."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

CADENCE_AUTO = "auto"
MAX_EVERY = 10_000_000
EVERY_HELP = ("steps between two checkpoints, or \"auto\": the interval that loses the least time, from the "
              "measured cost of a save (the time the loop is blocked) and how often the job's machines have "
              "failed (Young/Daly: sqrt(2 x cost x mean time between failures)), revised as the job runs")


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_EVERY},
                                {"type": "string", "enum": [CADENCE_AUTO]}], "description": EVERY_HELP})
class EveryNStepsField(serializers.Field):
    default_error_messages = {"invalid": f'a number of steps (1 to {MAX_EVERY}) or "auto".'}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", EVERY_HELP)
        super().__init__(**kwargs)

    def to_internal_value(self, data: Any) -> int | str:
        if data == CADENCE_AUTO:
            return CADENCE_AUTO
        if isinstance(data, bool) or not isinstance(data, int) or not 1 <= data <= MAX_EVERY:
            self.fail("invalid")
        return int(data)

    def to_representation(self, value: Any) -> int | str:
        return CADENCE_AUTO if value == CADENCE_AUTO else int(value)

"""The JobSpec's fields for the queue (jobs/placement/queue.py): `priority`, `time_limit`, `preemptible` and
`preemption`."""

from __future__ import annotations

import re
from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ...projects.serializers import PriorityField
from ...rest.strict import StrictFields
from ..spec.jobspec import DEFAULT_PREEMPTION_GRACE

__all__ = ["PreemptionSerializer", "PriorityField", "TimeLimitField", "duration_text"]

DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?$")
MAX_TIME_LIMIT = 90 * 86400


class PreemptionSerializer(StrictFields, serializers.Serializer):
    grace = serializers.FloatField(
        default=DEFAULT_PREEMPTION_GRACE, min_value=1, max_value=3600,
        help_text="seconds a preempted job's ranks have to checkpoint and yield before they are stopped "
                  "(a commit in progress is waited for); it resumes from its last committed checkpoint")


@extend_schema_field({"oneOf": [{"type": "integer", "minimum": 1, "maximum": MAX_TIME_LIMIT},
                                {"type": "string", "pattern": r"^(\d+d)?(\d+h)?(\d+m)?(\d+s)?$"}]})
class TimeLimitField(serializers.Field):
    """Seconds (3600), or a duration such as 90m, 2h, 1h30m, 1d; stored as seconds."""

    def to_internal_value(self, data: Any) -> int:
        seconds: int | None = None
        if isinstance(data, int) and not isinstance(data, bool):
            seconds = data
        elif isinstance(data, str) and data.strip():
            text = data.strip().lower()
            if text.isdigit():
                seconds = int(text)
            elif (match := DURATION.match(text)) is not None:
                days, hours, minutes, secs = (int(part or 0) for part in match.groups())
                seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
        if seconds is None:
            raise serializers.ValidationError("seconds (3600) or a duration such as 90m, 2h, 1h30m or 1d.")
        if not 1 <= seconds <= MAX_TIME_LIMIT:
            raise serializers.ValidationError(f"from 1 second to {MAX_TIME_LIMIT // 86400} days.")
        return seconds

    def to_representation(self, value: Any) -> Any:
        return value


def duration_text(seconds: float) -> str:
    """5400 -> "1h30m": how messages say a time limit."""
    seconds = int(seconds)
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size or (unit == "s" and not parts):
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)

"""fault_tolerance.stall_timeout as the API reads and writes it: a number of seconds, or "auto".

Its own module: the JobSpec's value (jobspec.py) and its intake (intake/sections.py) both use it, and
neither may import the other."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

STALL_AUTO = "auto"
STALL_TIMEOUT_HELP = ("seconds a rank's step may stand still before the job is hung, or \"auto\" (the default): "
                      "2x the job's p95 step time, at least 15 s, from the steps its ranks report (60 s until 8 "
                      "are timed, and for ranks that report none)")


@extend_schema_field({"oneOf": [{"type": "number", "minimum": 2, "maximum": 7 * 24 * 3600},
                                {"type": "string", "enum": [STALL_AUTO]}], "description": STALL_TIMEOUT_HELP})
class StallTimeoutField(serializers.Field):
    """fault_tolerance.stall_timeout: a number of seconds, or "auto" (null reads as "auto", as
    before it existed)."""

    default_error_messages = {"invalid": 'a number of seconds (2 to 604800) or "auto".'}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("help_text", STALL_TIMEOUT_HELP)
        kwargs.setdefault("allow_null", True)
        super().__init__(**kwargs)

    def validate_empty_values(self, data: Any) -> tuple[bool, Any]:
        if data is None:
            return True, STALL_AUTO
        return super().validate_empty_values(data)

    def to_internal_value(self, data: Any) -> float | str:
        if data == STALL_AUTO:
            return STALL_AUTO
        if isinstance(data, bool) or not isinstance(data, (int, float)) or not 2 <= data <= 7 * 24 * 3600:
            self.fail("invalid")
        return float(data)

    def to_representation(self, value: Any) -> float | str:
        return STALL_AUTO if value in (None, STALL_AUTO) else float(value)

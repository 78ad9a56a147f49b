"""Job priorities, as a JobSpec's `priority`, a project's ceiling and the queue's order use them.

A priority is an integer from PRIORITY_MIN to PRIORITY_MAX, higher first; the named levels are
points on that line, so a team can say `high` and still slot a job just above it (11). Here, in the
lowest app that needs them (a project's ceiling), so jobs and the API share one definition."""

from __future__ import annotations

from typing import Any

PRIORITY_NAMES = {"low": -10, "normal": 0, "high": 10}
PRIORITY_MIN, PRIORITY_MAX = -100, 100
DEFAULT_PRIORITY = PRIORITY_NAMES["normal"]
# The highest ceiling a project's own admins may set; above it only staff (a project that may queue
# ahead of `high` is a decision for whoever runs the cluster, not for one of its tenants).
ADMIN_CEILING_MAX = PRIORITY_NAMES["high"]


class BadPriority(ValueError):
    pass


def parse_priority(value: Any) -> int:
    """`low`, `normal`, `high` (any case), an integer, or an integer's text: the integer; BadPriority
    (saying what is accepted) otherwise."""
    if isinstance(value, str):
        text = value.strip().lower()
        if text in PRIORITY_NAMES:
            return PRIORITY_NAMES[text]
        try:
            value = int(text)
        except ValueError:
            raise BadPriority(f"{value!r} is not a priority: low, normal, high or an integer from "
                              f"{PRIORITY_MIN} to {PRIORITY_MAX}.") from None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadPriority(f"low, normal, high or an integer from {PRIORITY_MIN} to {PRIORITY_MAX}.")
    if not PRIORITY_MIN <= value <= PRIORITY_MAX:
        raise BadPriority(f"{value} is out of range: from {PRIORITY_MIN} to {PRIORITY_MAX}.")
    return value


def priority_label(value: int) -> str:
    """10 -> "10 (high)", 5 -> "5": how messages name a priority."""
    names = [name for name, number in PRIORITY_NAMES.items() if number == value]
    return f"{value} ({names[0]})" if names else str(value)

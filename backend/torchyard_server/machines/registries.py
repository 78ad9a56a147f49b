"""Hooks through which apps above machines add to what it shows, without machines importing them
(pyproject.toml's import contracts). An app registers its hook in its AppConfig.ready()."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# -> {machine id: [{"project": name, "gpus": n, "processes": n}, ...]}: what live nodes take there.
UsageLookup = Callable[[], dict[int, list[dict[str, Any]]]]

_usage_lookup: UsageLookup | None = None


def register_usage_lookup(lookup: UsageLookup) -> None:
    global _usage_lookup
    _usage_lookup = lookup


def machine_usage() -> dict[int, list[dict[str, Any]]]:
    # Without the jobs app nothing runs anywhere.
    return _usage_lookup() if _usage_lookup is not None else {}

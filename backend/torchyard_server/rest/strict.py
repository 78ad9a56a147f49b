"""Input that names a field the serializer does not declare is refused, never dropped.

DRF ignores keys a serializer does not declare: `resources: {"nodez": 2}` would validate as
`resources: {}` and the job run on one node. Serializers of user input take StrictFields first in
their bases: an unknown key is a field error at its path, naming the declared field it most likely
meant ("unknown field (did you mean nodes?)."). What the API shows may be sent back as it is: read-only
fields, and the keys a serializer names in `shown_only` (filled in by the server, like a bundle's
size), count as declared and are not read.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from rest_framework import serializers


def unknown_field(key: str, known: list[str]) -> str:
    """The error for `key`, with the nearest of `known` when one is near."""
    near = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    return f"unknown field (did you mean {near[0]}?)." if near else "unknown field."


# A mixin for serializers.Serializer (module docstring). No docstring of its own: the API schema
# would show it as the description of every serializer that has none.
class StrictFields:

    shown_only: tuple[str, ...] = ()

    def to_internal_value(self, data: Any) -> Any:
        """The declared fields' errors and the unknown keys' together, in one answer."""
        unknown: dict[str, list[str]] = {}
        if isinstance(data, Mapping):
            fields = self.fields  # type: ignore[attr-defined]
            writable = [name for name, field in fields.items() if not field.read_only]
            unknown = {str(key): [unknown_field(key, writable)] for key in data
                       if key not in fields and key not in self.shown_only}
        try:
            value = super().to_internal_value(data)  # type: ignore[misc]
        except serializers.ValidationError as exc:
            if unknown and isinstance(exc.detail, dict):
                raise serializers.ValidationError({**exc.detail, **unknown}) from exc
            raise
        if unknown:
            raise serializers.ValidationError(unknown)
        return value

"""Query parameters shared by the API views of several apps."""

from __future__ import annotations

from typing import overload

from rest_framework.exceptions import ValidationError


@overload
def int_param(request, name: str, default: int, *, maximum: int | None = None) -> int: ...
@overload
def int_param(request, name: str, default: None, *, maximum: int | None = None) -> int | None: ...
def int_param(request, name: str, default: int | None, *, maximum: int | None = None) -> int | None:
    raw = request.query_params.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValidationError({name: ["must be an integer."]}) from None
    if value < 0:
        raise ValidationError({name: ["must be >= 0."]})
    return min(value, maximum) if maximum else value

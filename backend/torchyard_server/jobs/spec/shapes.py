"""The API's ...Out serializers made from the job's typed values (jobspec.py, plan.py, progress.py),
so that each field is declared once: its type says which DRF field shows it, its metadata
(stored.shown) what the schema says of it beyond the type (help_text, choices). A value's field
that is optional (OMIT_WHEN_NONE) may be absent from the output, unless its DRF field writes null
or a default in its place; one that may hold None is otherwise nullable. The value's INTERNAL
fields are never shown."""

from __future__ import annotations

import types
import typing
from typing import Any

from rest_framework import serializers
from rest_framework.fields import empty

from .stored import StoredValue, declared_fields

_PLAIN: dict[Any, type[serializers.Field]] = {
    str: serializers.CharField, int: serializers.IntegerField, float: serializers.FloatField,
    bool: serializers.BooleanField,
}
# The serializer made for each value, found again where another value nests it.
_MADE: dict[type[StoredValue], type[serializers.Serializer]] = {}


def out_serializer(value: type[StoredValue], name: str, *, base: type[serializers.Serializer] = serializers.Serializer,
                   numbers: dict[type, type[serializers.Field]] | None = None,
                   shapes: dict[str, type[serializers.Serializer]] | None = None, doc: str | None = None,
                   ) -> type[serializers.Serializer]:
    """The serializer class `name` showing `value`'s fields. `numbers`: the DRF fields for its int
    and float fields (what ranks reported: any stored value shows, as null when not a number).
    `shapes`: the serializer of a field the value holds as a plain dict (or a list of them)."""
    hints = typing.get_type_hints(value)
    shapes = dict(shapes or {})
    shown = {
        f.name: _field(hints[f.name], dict(f.metadata.get("api", {})), optional=f.name in value.OMIT_WHEN_NONE,
                       numbers=numbers or {}, shape=shapes.pop(f.name, None))
        for f in declared_fields(value) if f.name not in value.INTERNAL
    }
    if shapes:
        raise TypeError(f"{name}: {value.__name__} has no fields {sorted(shapes)}")
    optional = tuple(n for n, field in shown.items() if n in value.OMIT_WHEN_NONE and not _always_written(field))
    made = type(name, (base,), {**shown, "Meta": type("Meta", (), {"optional_fields": optional}), "__doc__": doc})
    _MADE[value] = made
    return made


def serializer_of(value: type[StoredValue]) -> type[serializers.Serializer]:
    """The ...Out serializer made from `value` (KeyError: none was)."""
    return _MADE[value]


def _always_written(field: serializers.Field) -> bool:
    return field.allow_null or field.default is not empty


def _field(hint: Any, api: dict[str, Any], *, optional: bool, numbers: dict[type, type[serializers.Field]],
           shape: type[serializers.Serializer] | None) -> serializers.Field:
    kind, may_be_none = _without_none(hint)
    if "absent_as" in api:  # what the output writes when the stored value lacks the key
        api["default"] = api.pop("absent_as")
    if optional:
        api.setdefault("required", False)  # left out of the output where the stored value lacks it
    elif may_be_none and kind not in numbers:
        api.setdefault("allow_null", True)
    if "field" in api:  # a field of its own (a type the plain ones cannot say: "auto" or a number)
        return api.pop("field")(**api)
    if "choices" in api:
        return serializers.ChoiceField(**api)
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if shape is not None:
        return shape(many=True, **api) if origin is list else shape(**api)
    item = api.pop("item", {})  # what the schema says of each item of a list or dict
    if origin is list:
        if _is_value(args[0]):
            return _MADE[args[0]](many=True, **api)
        return serializers.ListField(child=_item(args[0], numbers, item), **api)
    if origin is dict:
        return serializers.DictField(**({} if args[1] is Any else {"child": _item(args[1], numbers, item)}), **api)
    if _is_value(kind):
        return _MADE[kind](**api)
    return (numbers.get(kind) or _PLAIN[kind])(**api)


def _item(kind: Any, numbers: dict[type, type[serializers.Field]], api: dict[str, Any]) -> serializers.Field:
    return (numbers.get(kind) or _PLAIN[kind])(**api)


def _without_none(hint: Any) -> tuple[Any, bool]:
    """`X | None` -> (X, True); X -> (X, False)."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        rest = [arg for arg in typing.get_args(hint) if arg is not type(None)]
        return rest[0], len(rest) < len(typing.get_args(hint))
    return hint, False


def _is_value(kind: Any) -> bool:
    return isinstance(kind, type) and issubclass(kind, StoredValue)

"""The base of the job's typed values (jobspec.py, plan.py, progress.py): a dataclass read from
the JSON a JSONField stores and written back to the same JSON. A key a value does not declare
(written by an older or newer server) is kept as it is, so reading and writing back never drops
one; an optional key that is absent reads as None and is left out again on the way back, while
one stored as null stays null."""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Self


@dataclasses.dataclass
class StoredValue:
    # Keys whose absence is meaningful: None reads as "absent" and is not written.
    OMIT_WHEN_NONE: ClassVar[frozenset[str]] = frozenset()
    # Keys holding a nested value: one StoredValue class, or a list of them ([cls]).
    NESTED: ClassVar[dict[str, Any]] = {}
    # The server's own bookkeeping, stored with the value but no part of its API shape (the ...Out
    # serializer made from the value, jobs/shapes.py, shows every other field).
    INTERNAL: ClassVar[frozenset[str]] = frozenset()

    # What the JSON held beyond the declared keys, written back as it was.
    extra: dict[str, Any] = dataclasses.field(default_factory=dict, kw_only=True, repr=False, compare=False)
    # The optional keys the JSON held as null (not absent): written back as null while still None.
    stored_null: frozenset[str] = dataclasses.field(default=frozenset(), kw_only=True, repr=False, compare=False)

    @classmethod
    def from_json(cls, data: dict[str, Any] | None) -> Self:
        data = dict(data or {})
        known = {f.name for f in dataclasses.fields(cls) if f.name not in _OWN}
        nulls = frozenset(name for name in cls.OMIT_WHEN_NONE if name in data and data[name] is None)
        given = {name: _read(cls.NESTED.get(name), data.pop(name)) for name in known & data.keys()}
        return cls(**given, extra=data, stored_null=nulls)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name in _OWN or (value is None and f.name in self.OMIT_WHEN_NONE and f.name not in self.stored_null):
                continue
            out[f.name] = _write(value)
        return {**out, **self.extra}


_OWN = frozenset({"extra", "stored_null"})


def shown(default: Any = dataclasses.MISSING, *, factory: Any = dataclasses.MISSING, **api: Any) -> Any:
    """A value's field with what the API's schema says of it beyond its type (help_text, choices,
    absent_as: what the output writes when the stored value lacks it): the value's ...Out
    serializer (jobs/shapes.py) gives them to the field it makes."""
    return dataclasses.field(default=default, default_factory=factory, metadata={"api": api})


def declared_fields(value: type[StoredValue]) -> list[dataclasses.Field]:
    """The fields a value declares, in order: not the base's bookkeeping."""
    return [f for f in dataclasses.fields(value) if f.name not in _OWN]


def _read(kind: Any, value: Any) -> Any:
    if value is None or kind is None:
        return value
    if isinstance(kind, list):
        return [kind[0].from_json(item) for item in value]
    return kind.from_json(value)


def _write(value: Any) -> Any:
    if isinstance(value, StoredValue):
        return value.to_json()
    if isinstance(value, list):
        return [_write(item) for item in value]
    return value

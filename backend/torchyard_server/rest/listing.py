"""Long lists serialized without DRF's per-field machinery, to the same JSON.

A ModelSerializer costs about half a millisecond per row and field set on a small machine: a
thousand machines took most of a second, on every `GET /api/machines` and every cluster-stream
snapshot. Most fields are a model attribute already in its JSON form (text, numbers, booleans, JSON
columns): FlatListSerializer copies those as they are, formats datetimes as DRF does, and hands
every other field (method fields, nested serializers, anything with a source path) to the field
itself. When every field reads one column (method fields get the row: `row.pk`, `row.<column>`),
a queryset is read with `.values()`, without building model instances.
tests/machines/test_machine_list.py holds the output equal to the plain serializer's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.db.models import Manager, QuerySet
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import _UnvalidatedField as _Unvalidated
from rest_framework.settings import api_settings

# Fields whose representation of a value read from the database is the value itself.
_AS_STORED = (serializers.CharField, serializers.ChoiceField, serializers.IntegerField, serializers.BigIntegerField,
              serializers.BooleanField, serializers.FloatField, serializers.JSONField)


class StoredJsonOut(serializers.Serializer):
    """A JSON column written out as it is stored (a shallow copy), its declared fields the shape
    the OpenAPI schema gives it, so generated clients type it. What such a column holds was checked
    on its way in (a JobSpec) or written by Torchyard's own agents (a machine's capabilities and
    load); it is not checked again on every read, and a list copies it as it is."""

    def to_representation(self, instance: Any) -> Any:
        return dict(instance)


def _as_stored(field: serializers.Field) -> bool:
    if type(field) in _AS_STORED or isinstance(field, StoredJsonOut):
        return True
    # A DictField of such values (labels: text to text), or of anything (DictField()'s default child).
    return type(field) is serializers.DictField and (type(field.child) in _AS_STORED or type(field.child) is _Unvalidated)


def _reader(field: serializers.Field) -> Callable[[Any], Any]:
    """How one field turns an instance into its value in the output."""
    if field.source == "*" or len(field.source_attrs) != 1:
        return _as_drf_does(field)
    name = field.source_attrs[0]
    if _as_stored(field):
        return lambda instance: getattr(instance, name)
    if type(field) is serializers.DateTimeField and getattr(field, "format", api_settings.DATETIME_FORMAT) == ISO_8601:
        # DateTimeField.to_representation, its time zone looked up once rather than per value.
        zone = getattr(field, "timezone", None) or field.default_timezone()

        def iso(instance: Any) -> Any:
            value = getattr(instance, name)
            if value is None:
                return None
            text = (value.astimezone(zone) if zone is not None and timezone.is_aware(value) else value).isoformat()
            return text[:-6] + "Z" if text.endswith("+00:00") else text
        return iso
    return _as_drf_does(field)


def _as_drf_does(field: serializers.Field) -> Callable[[Any], Any]:
    """Serializer.to_representation's way, for one field."""
    def read(instance: Any) -> Any:
        attribute = field.get_attribute(instance)
        return None if attribute is None else field.to_representation(attribute)
    return read


class _Row(dict):
    """A `.values()` row read like a model instance (`row.name`), without building one."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


class FlatListSerializer(serializers.ListSerializer):
    """`Meta.list_serializer_class` of a serializer whose lists are long and only written out."""

    def to_representation(self, data: Any) -> list[dict[str, Any]]:
        fields = list(self.child._readable_fields)
        readers = [(field.field_name, _reader(field)) for field in fields]
        items = data.all() if isinstance(data, Manager) else data
        columns = _plain_columns(fields)
        if isinstance(items, QuerySet) and columns is not None:
            # Rows rather than model instances: building a thousand instances is a third of the cost.
            items = (_Row(row) for row in items.values("pk", *columns))
        return [{name: read(item) for name, read in readers} for item in items]


def _plain_columns(fields: list[serializers.Field]) -> list[str] | None:
    """The columns the fields read, when each reads one attribute (or is a method field, which is
    handed the row); None when some field needs a real instance."""
    columns = []
    for field in fields:
        if isinstance(field, serializers.SerializerMethodField):
            continue
        if field.source == "*" or len(field.source_attrs) != 1 or not (
                _as_stored(field) or type(field) is serializers.DateTimeField):
            return None
        columns.append(field.source_attrs[0])
    return columns

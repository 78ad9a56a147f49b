"""The live streams' contract (torchyard.stream_contract) in the OpenAPI schema.

OpenAPI describes HTTP operations only, so the WebSocket routes are listed under the document's
`x-websockets` extension, each naming the component of the messages it sends, and every message,
event payload and close code is a component like the REST bodies: openapi-typescript generates the
dashboard's types for them with the REST ones (`make api-types`), and `make lint` finds them stale
the same way. A spectacular postprocessing hook (SPECTACULAR_SETTINGS["POSTPROCESSING_HOOKS"]), not a
documented pseudo-view: a GET the server does not answer would be an operation schemathesis calls.

Each TypedDict becomes a component under its class name; an event payload (a member of JobEvent) is
EventOut and its own fields (allOf); Annotated[..., "Name"] is a reference to the REST component
Name; a union the contract names (NAMED_UNIONS) is a oneOf component, referenced wherever it occurs.
drf-spectacular's resolve_type_hint reads TypedDicts too, but inlines every nested one and has no
way to refer to a serializer's component, so generated types would lose their names.
"""

from __future__ import annotations

import inspect
import types
import typing
from typing import Any, Literal, NotRequired, TypedDict

from torchyard import stream_contract as contract

from ..jobs.states import JOB_LIVE, JOB_TRANSITIONS

# An OpenAPI 3.0 schema object, of the keywords these components use ("$ref" is no identifier).
SchemaObject = TypedDict("SchemaObject", {
    "$ref": str,
    "type": str,
    "enum": list[Any],
    "items": "SchemaObject",
    "properties": "dict[str, SchemaObject]",
    "required": list[str],
    "additionalProperties": "SchemaObject | bool",
    "oneOf": "list[SchemaObject]",
    "allOf": "list[SchemaObject]",
    "nullable": bool,
    "description": str,
}, total=False)

_SCALARS: dict[type, SchemaObject] = {int: {"type": "integer"}, float: {"type": "number"}, str: {"type": "string"},
                                      bool: {"type": "boolean"}}
_REF = "#/components/schemas/"
_ENVELOPE = frozenset(contract.EventEnvelope.__annotations__)


def _ref(name: str) -> SchemaObject:
    return {"$ref": _REF + name}


def _is_typeddict(hint: Any) -> bool:
    return typing.is_typeddict(hint)


def _union_name(members: tuple[Any, ...]) -> str | None:
    for name, union in contract.NAMED_UNIONS.items():
        if set(typing.get_args(union)) == set(members):
            return name
    return None


def _schema(hint: Any) -> SchemaObject:
    """The OpenAPI schema of one type of the contract (module docstring)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Annotated:
        return _ref(args[1])
    if _is_typeddict(hint):
        return _ref(hint.__name__)
    if origin is Literal:
        return {**_SCALARS[type(args[0])], "enum": list(args)}
    if origin is list:
        return {"type": "array", "items": _schema(args[0])}
    if origin is dict and args[0] is str:  # keyed by name (a rank, a node): an object of like values
        return {"type": "object", "additionalProperties": _schema(args[1])}
    if origin in (typing.Union, types.UnionType):
        members = tuple(a for a in args if a is not type(None))
        if len(members) < len(args):  # Optional
            inner = _schema(members[0] if len(members) == 1 else typing.Union[members])  # noqa: UP007
            return {**inner, "nullable": True} if "$ref" not in inner else {"allOf": [inner], "nullable": True}
        name = _union_name(members)
        return _ref(name) if name else {"oneOf": [_schema(m) for m in members]}
    if hint in _SCALARS:
        return _SCALARS[hint].copy()
    if hint is Any:  # any JSON (a script's own metadata)
        return {}
    raise TypeError(f"the stream contract uses a type the schema cannot describe: {hint!r}")


def _object(cls: type, *, skip: frozenset[str] = frozenset()) -> SchemaObject:
    properties: dict[str, SchemaObject] = {}
    required: list[str] = []
    for key, hint in typing.get_type_hints(cls, include_extras=True).items():
        if key in skip:
            continue
        optional = typing.get_origin(hint) is NotRequired
        properties[key] = _schema(typing.get_args(hint)[0] if optional else hint)
        if not optional:
            required.append(key)
    body: SchemaObject = {"type": "object", "properties": properties, "required": required}
    if cls.__name__ in contract.OPEN_PAYLOADS:
        body["additionalProperties"] = True
    return body


def _component(cls: type) -> SchemaObject:
    body: SchemaObject
    if cls in typing.get_args(contract.JobEvent):
        # The envelope the event extends is EventOut's part of it.
        body = {"allOf": [_ref(contract.ENVELOPE_COMPONENT), _object(cls, skip=_ENVELOPE)]}
    else:
        body = _object(cls)
    return {**body, "description": inspect.cleandoc(cls.__doc__)} if cls.__doc__ else body


def stream_components() -> dict[str, SchemaObject]:
    """Every component the contract defines: its TypedDicts, its named unions, the close codes and
    the live job statuses."""
    # The envelope is no component of its own: EventOut publishes it, as the routes send it.
    typeddicts = [v for v in vars(contract).values() if _is_typeddict(v) and v is not contract.EventEnvelope]
    components = {cls.__name__: _component(cls) for cls in typeddicts}
    for name, union in contract.NAMED_UNIONS.items():
        components[name] = {"oneOf": [_schema(m) for m in typing.get_args(union)]}
    components["StreamCloseCode"] = {
        "type": "integer", "enum": list(contract.CLOSE_CODES),
        "description": "Application close codes of the streams (torchyard.stream_contract)."}
    components["StreamRefusedCloseCode"] = {
        "type": "integer", "enum": list(contract.REFUSED_CLOSE_CODES),
        "description": "Close codes that mean: do not retry (4401 log in again, 4404 no such job)."}
    components["StreamResumeCloseCode"] = {
        "type": "integer", "enum": [contract.CLOSE_RESUME],
        "description": "Fell behind: reconnect at once with ?after=<the last event id you have>."}
    components["LiveJobStatusEnum"] = {
        "type": "string", "enum": [str(s) for s in JOB_TRANSITIONS if s in JOB_LIVE],
        "description": "Job statuses that still change (jobs/states.py JOB_LIVE)."}
    return components


class WebSocketRoute(TypedDict):
    messages: SchemaObject  # the union of what the route sends
    close_codes: SchemaObject


class Components(TypedDict, total=False):
    schemas: dict[str, SchemaObject]


# The OpenAPI document drf-spectacular made, of the parts this hook writes.
OpenApiDocument = TypedDict("OpenApiDocument", {
    "components": Components,
    "x-websockets": dict[str, WebSocketRoute],
}, total=False)


def add_stream_contract(result: OpenApiDocument, generator: Any, request: Any, public: bool) -> OpenApiDocument:
    """drf-spectacular postprocessing hook: the stream components and the `x-websockets` routes."""
    schemas = result.setdefault("components", {}).setdefault("schemas", {})
    for name, schema in stream_components().items():
        if name in schemas:
            raise ValueError(f"stream contract component {name} clashes with a REST component")
        schemas[name] = schema
    result["x-websockets"] = {path: {"messages": _ref(union), "close_codes": _ref("StreamCloseCode")}
                              for path, union in contract.ROUTES.items()}
    return result

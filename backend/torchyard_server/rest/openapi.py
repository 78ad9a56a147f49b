"""The OpenAPI schema's shared parts: the error bodies every route can answer with, added to each
operation from what it takes (a body, query parameters, path parameters, a signed-in user), so the
schema lists every status a client must handle and generated clients type them."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.plumbing import build_bearer_security_scheme_object
from rest_framework import serializers


class ApiTokenScheme(OpenApiAuthenticationExtension):
    """`Authorization: Token <t>` (accounts.auth: knox's hashed tokens)."""

    target_class = "torchyard_server.accounts.auth.ApiTokenAuthentication"
    name = "tokenAuth"

    def get_security_definition(self, auto_schema):
        return build_bearer_security_scheme_object(header_name="Authorization", token_prefix="Token")


class ErrorOut(serializers.Serializer):
    """Any refusal that is not about a field: not signed in (401), not allowed (403), not found (404),
    a conflict (409), a body of the wrong media type (415)."""

    detail = serializers.CharField()


class ValidationErrorOut(serializers.Serializer):
    """Bad input (400): each field that was wrong names its messages, as a list of strings, or an
    object for a nested section (`{"resources": {"nodes": ["..."]}}`); errors about the request as a
    whole are under `non_field_errors` or `detail`."""

    non_field_errors = serializers.ListField(child=serializers.CharField(), required=False)
    detail = serializers.CharField(required=False)

    class Meta:
        optional_fields = ('non_field_errors', 'detail')


def _error(serializer: type[serializers.Serializer], description: str, auto: AutoSchema, code: str) -> dict:
    # JSON whatever the route's renderers: a download route's errors are JSON too.
    response = auto._get_response_for_code(serializer, code, media_types=["application/json"])
    response["description"] = description
    return response


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's, plus the error responses an operation can give, where its view did not
    declare them itself, and output serializers whose fields are all required."""

    def _map_basic_serializer(self, serializer, direction):
        schema = super()._map_basic_serializer(serializer, direction)
        # An `...Out` serializer always writes every field (null where there is no value), whatever
        # the model's defaults made DRF think about input; generated clients should not have to
        # test for absence. A field that really may be left out is named in Meta.optional_fields.
        name = type(serializer).__name__ if not isinstance(serializer, type) else serializer.__name__
        if direction == "response" and name.endswith("Out") and schema.get("properties"):
            optional = set(getattr(getattr(serializer, "Meta", None), "optional_fields", ()))
            required = sorted(set(schema["properties"]) - optional)
            if required:
                schema["required"] = required
            else:
                schema.pop("required", None)
        return schema

    def get_operation(self, path, path_regex, path_prefix, method, registry):
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses = operation["responses"]
        parameters = operation.get("parameters", [])
        security = operation.get("security")
        # Any route: a NUL character in the URL is refused before any view (web/middleware.py).
        errors = [("400", ValidationErrorOut, "Bad input: the messages of each field that was wrong.")]
        if security and {} not in security:
            errors.append(("401", ErrorOut, "Not signed in, or the token or session is not valid."))
            errors.append(("403", ErrorOut, "Signed in, but not allowed to do this."))
        if any(p["in"] == "path" for p in parameters):
            errors.append(("404", ErrorOut, "No such object, or not one this user may see."))
        if "requestBody" in operation:
            errors.append(("415", ErrorOut, "The body is not of a media type this route takes."))
        for code, serializer, description in errors:
            responses.setdefault(code, _error(serializer, description, self, code))
        return operation

"""The jobs app's domain errors. Services raise these; the API maps each to its HTTP answer in one
place (web/errors.py exception_handler), so no service knows of HTTP."""

from __future__ import annotations

# Refusals keyed by field as a serializer's errors are: a field's messages, or a nested field's own.
FieldErrors = dict[str, "list[str] | FieldErrors"]


class SpecRefused(Exception):
    """A JobSpec whose shape is right but that names what its submitter may not use, or cannot be
    run as asked (an unknown bundle, a priority above the project's ceiling): 400, keyed by field as
    a shape error is (`errors`: {"code": {"bundle": ["..."]}})."""

    def __init__(self, errors: FieldErrors):
        super().__init__(str(errors))
        self.errors = errors

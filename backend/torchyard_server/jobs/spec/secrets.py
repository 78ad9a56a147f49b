"""A JobSpec's secret_env: sealed once validated (secretbox), so that the spec as stored, planned
or logged never holds a value in clear, and masked wherever the API shows a spec."""

from __future__ import annotations

from typing import Any

from . import secretbox


def seal_secret_env(values: dict[str, str]) -> dict[str, str]:
    return {name: secretbox.seal(secret) for name, secret in values.items()}


def public_spec(spec: dict[str, Any]) -> dict[str, Any]:
    """A stored spec as the API shows it: secret_env's names, each value (sealed) as ***."""
    if "secret_env" not in spec:
        return spec
    return {**spec, "secret_env": secretbox.masked(spec["secret_env"])}

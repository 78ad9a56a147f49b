"""A plugin's manifest: what `torchyard plugin push` registers and the harness runs.

A plugin is a directory. Its manifest is `torchyard-plugin.json`:

    {"name": "llama_trainer", "version": "1.2.0", "entrypoint": "main.py",
     "description": "...", "default_config": {"batch_size": 32, "lr": 0.0005}}

or, for a plugin written for TransformerLab, its `index.json` (`uniqueId` is the name, `parameters`'
defaults the default config, `main.py` the entrypoint, as TransformerLab's harness runs it). A
directory with neither is a plugin when it is given a name: entrypoint `main.py`, version 0.0.0.
Every problem is a ManifestError naming the file and the field.
"""

from __future__ import annotations

import json
import posixpath
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_FILE = "torchyard-plugin.json"
TRANSFORMERLAB_MANIFEST = "index.json"
DEFAULT_ENTRYPOINT = "main.py"
DEFAULT_VERSION = "0.0.0"
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")
NAME_RULE = "1 to 100 letters, digits, '_', '.' or '-', starting with a letter or digit"
FIELDS = ("name", "version", "entrypoint", "description", "default_config")


class ManifestError(ValueError):
    """A manifest that is missing or invalid; the message names the file and the field."""


@dataclass
class PluginManifest:
    name: str
    version: str = DEFAULT_VERSION
    entrypoint: str = DEFAULT_ENTRYPOINT
    description: str = ""
    default_config: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def check_entrypoint(value: Any) -> str:
    """A relative .py path that stays inside the plugin; the reason as a ValueError."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError("must be the plugin's script, a path such as main.py")
    normalized = posixpath.normpath(value)
    if value.startswith("/") or "\\" in value or normalized.startswith(".."):
        raise ValueError(f"{value!r} must be a relative path inside the plugin's directory")
    if not normalized.endswith(".py"):
        raise ValueError(f"{value!r} must be a Python script (.py)")
    return normalized


def _field(source: str, key: str, value: Any, kind: type, rule: str) -> Any:
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ManifestError(f"{source}: {key}: {rule}")
    return value


def manifest_from(data: Any, source: str, *, name: str | None = None) -> PluginManifest:
    """A manifest from torchyard-plugin.json's object; `name` (--name) overrides its name."""
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: not a JSON object")
    unknown = sorted(set(data) - set(FIELDS))
    if unknown:
        raise ManifestError(f"{source}: {', '.join(unknown)}: unknown field (known: {', '.join(FIELDS)})")
    chosen = name if name is not None else data.get("name")
    if chosen is None:
        raise ManifestError(f"{source}: name: required (or give --name)")
    if not isinstance(chosen, str) or not NAME.match(chosen):
        raise ManifestError(f"{source}: name: {chosen!r} is not a plugin name ({NAME_RULE})")
    try:
        entrypoint = check_entrypoint(data.get("entrypoint", DEFAULT_ENTRYPOINT))
    except ValueError as exc:
        raise ManifestError(f"{source}: entrypoint: {exc}") from None
    return PluginManifest(
        name=chosen,
        version=_field(source, "version", data.get("version", DEFAULT_VERSION), str, "must be a string such as 1.0.0"),
        entrypoint=entrypoint,
        description=_field(source, "description", data.get("description", ""), str, "must be a string"),
        default_config=_field(source, "default_config", data.get("default_config", {}), dict,
                              "must be a JSON object of settings"),
    )


def transformerlab_manifest(data: Any, source: str, *, name: str | None = None) -> PluginManifest:
    """TransformerLab's index.json: uniqueId (else name), version, description, parameters' defaults."""
    if not isinstance(data, dict):
        raise ManifestError(f"{source}: not a JSON object")
    parameters = data.get("parameters") or {}
    if not isinstance(parameters, dict):
        raise ManifestError(f"{source}: parameters: must be a JSON object")
    defaults = {key: spec["default"] for key, spec in parameters.items() if isinstance(spec, dict) and "default" in spec}
    return manifest_from({
        "name": data.get("uniqueId") or data.get("name"),
        "version": str(data.get("version", DEFAULT_VERSION)),
        "description": data.get("description", ""),
        "entrypoint": DEFAULT_ENTRYPOINT,
        "default_config": defaults,
    }, source, name=name)


def _load(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ManifestError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise ManifestError(f"{path}: not valid JSON: {exc}") from None


def read_manifest(directory: Path, *, name: str | None = None) -> PluginManifest:
    """The plugin in `directory`: its torchyard-plugin.json, else TransformerLab's index.json, else
    (with a `name`) main.py; ManifestError when none applies or the entrypoint is not there."""
    directory = Path(directory)
    ours, theirs = directory / MANIFEST_FILE, directory / TRANSFORMERLAB_MANIFEST
    if ours.is_file():
        manifest = manifest_from(_load(ours), str(ours), name=name)
    elif theirs.is_file():
        manifest = transformerlab_manifest(_load(theirs), str(theirs), name=name)
    elif name is not None:
        manifest = manifest_from({}, str(directory), name=name)
    else:
        raise ManifestError(f"{directory}: no {MANIFEST_FILE} (or TransformerLab's {TRANSFORMERLAB_MANIFEST}); "
                            f"add one, or give --name to push it with the entrypoint {DEFAULT_ENTRYPOINT}")
    if not (directory / manifest.entrypoint).is_file():
        raise ManifestError(f"{directory}: entrypoint: {manifest.entrypoint} is not a file of the plugin")
    return manifest

"""`torchyard plugin push DIR`, `plugin list` and `plugin rm NAME`: plugins (TransformerLab) registered on the server.

Push reads the manifest here (a missing or invalid one is refused before anything is sent), uploads
the directory as a content-addressed bundle (nothing when the server already has it) and registers
it with `POST /api/plugins`; the server checks it again and answers field errors.
"""

from __future__ import annotations

from pathlib import Path
from typing import TypedDict
from urllib.parse import quote

from rich.console import Console

from torchyard.plugin_manifest import ManifestError, read_manifest

from . import CliError
from .http import ApiClient
from .output import say
from .upload import upload_project


class PluginShown(TypedDict, total=False):
    """What the CLI reads of a plugin of GET /api/plugins or of a push's answer (the REST schema's PluginOut)."""

    name: str
    version: str
    description: str
    entrypoint: str
    builtin: bool
    bundle: str | None  # null for a built-in one
    project: str | None


def push_plugin(api: ApiClient, directory: Path, console: Console, *, name: str | None = None,
                project: str | None = None) -> PluginShown:
    if not directory.is_dir():
        raise CliError(f"{directory}: not a directory")
    try:
        manifest = read_manifest(directory, name=name)
    except ManifestError as exc:
        raise CliError(str(exc)) from None
    bundle = upload_project(api, directory, console, entrypoint=manifest.entrypoint)
    body = {**manifest.to_dict(), "bundle": bundle, **({"project": project} if project else {})}
    plugin: PluginShown = api.call("POST", "/api/plugins", body)
    say(console, f"plugin {plugin['name']} {plugin['version']} registered (entrypoint {plugin['entrypoint']}, "
                 f"bundle {str(plugin['bundle'])[:12]}); run it with plugin_name {plugin['name']!r}")
    return plugin


def plugin_lines(plugins: list[PluginShown]) -> list[str]:
    lines = []
    for plugin in plugins:
        origin = "built-in" if plugin["builtin"] else plugin.get("project") or ""
        lines.append(f"{plugin['name']:<24} {plugin['version']:<10} {origin:<12} {plugin['description'][:60]}")
    return lines


def remove_plugin(api: ApiClient, name: str, console: Console, *, project: str | None = None) -> None:
    """Delete a registered plugin; without `project`, the one plugin of that name the user can see."""
    if project is None:
        projects = sorted(p["project"] for p in api.call("GET", "/api/plugins") if not p["builtin"] and p["name"] == name)
        if not projects:
            raise CliError(f"no registered plugin named {name!r} that you can see (`torchyard plugin list`)")
        if len(projects) > 1:
            raise CliError(f"plugin {name!r} is registered in projects {', '.join(projects)}: give --project")
        project = projects[0]
    api.call("DELETE", f"/api/plugins/{quote(project, safe='')}/{quote(name, safe='')}")
    say(console, f"plugin {name} of project {project} removed")

"""Reading plugins: the registered ones a user may see (scoped by project, as jobs and tasks are) and
the built-in recipes, each shown as a plugin shipped with Torchyard."""

from __future__ import annotations

import datetime as dt
import posixpath
from typing import Any, TypedDict

import torchyard
from django.db.models import QuerySet

from ..jobs.spec.recipes import recipe_catalog
from ..projects.permissions import scope_to_user
from .models import Plugin


class PluginRow(TypedDict):
    """A plugin as the API shows it (PluginOut): a registered one, or a built-in recipe."""

    name: str
    version: str
    description: str
    entrypoint: str
    default_config: dict[str, Any]  # the plugin's own settings, which a run's config overrides
    builtin: bool
    bundle: str | None  # sha256 of its code; None for a built-in one
    created_at: dt.datetime | None
    project: str | None


def plugins_visible_to(user: Any) -> QuerySet[Plugin]:
    return scope_to_user(Plugin.objects.select_related("project", "bundle", "owner"), user)


def plugin_bundle_for(sha256: str, user: Any) -> Any:
    """The bundle of a plugin `user` may see (a plugin of one of their projects), or None: whoever
    may run a plugin may run its code, from any route (jobs.registries.shared_bundle_for)."""
    plugin = plugins_visible_to(user).filter(bundle__sha256=sha256).first()
    return plugin.bundle if plugin is not None else None


def builtin_name(entrypoint: str) -> str:
    """examples/mlp_ddp.py -> mlp_ddp: what the seed's routes call a built-in recipe."""
    return posixpath.basename(entrypoint).removesuffix(".py")


def builtin_plugins() -> list[PluginRow]:
    return [{"name": builtin_name(recipe["entrypoint"]), "version": torchyard.__version__,
             "description": recipe["summary"], "entrypoint": recipe["entrypoint"], "default_config": {},
             "builtin": True, "bundle": None, "created_at": None, "project": None}
            for recipe in recipe_catalog()]


def plugin_row(plugin: Plugin) -> PluginRow:
    return {"name": plugin.name, "version": plugin.version, "description": plugin.description,
            "entrypoint": plugin.entrypoint, "default_config": plugin.default_config, "builtin": False,
            "bundle": plugin.bundle.sha256, "created_at": plugin.created_at, "project": plugin.project.name}


def plugin_catalog(user: Any, *, project: str | None = None) -> list[PluginRow]:
    """The built-in plugins, then the registered ones this user may see (of one project when given)."""
    registered = plugins_visible_to(user)
    if project:
        registered = registered.filter(project__name=project)
    return builtin_plugins() + [plugin_row(p) for p in registered]

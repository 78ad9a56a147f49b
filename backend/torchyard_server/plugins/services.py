"""Registering plugins, and turning a plugin name into the parts of a JobSpec that run it."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.utils import timezone
from rest_framework import serializers
from rest_framework.exceptions import PermissionDenied

from ..audit import services as audit
from ..jobs.spec.jobspec import JobSpec
from ..jobs.spec.recipes import builtin_recipes
from ..projects.permissions import can_control_job
from .models import Plugin
from .selectors import builtin_name, plugins_visible_to

# How a registered plugin runs: the harness under `accelerate launch` (TransformerLab), so that a
# TransformerLab plugin finds its `accelerator` in __main__ and its adjusted config.
PLUGIN_LAUNCHER = "accelerate"


def plugin_register(*, data: dict[str, Any], owner: Any) -> tuple[Plugin, bool]:
    """Register (or replace, as a new version) the plugin `data` describes (PluginIn's validated
    data); (plugin, created). Replacing is for its owner or an admin of its project, as for jobs."""
    project = data["project"]
    with transaction.atomic():
        # Locked: two pushes of one name at once must not both create it.
        existing = Plugin.objects.select_for_update().filter(project=project, name=data["name"]).first()
        if existing is not None and not can_control_job(owner, existing):
            raise PermissionDenied(f"plugin {data['name']!r} of project {project.name} is {existing.owner.get_username()}'s: "
                                   "only they or an admin of the project may push a new version.")
        fields = {key: data[key] for key in ("version", "description", "entrypoint", "default_config", "bundle")}
        if existing is None:
            plugin, created = Plugin.objects.create(project=project, name=data["name"], owner=owner, **fields), True
        else:
            previous = existing.version
            for key, value in fields.items():
                setattr(existing, key, value)
            existing.created_at = timezone.now()
            existing.save()
            plugin, created = existing, False
        audit.record(None, audit.Action.PLUGIN_PUSH, plugin, version=plugin.version, bundle=plugin.bundle.sha256,
                     **({} if created else {"replaced_version": previous}))
        return plugin, created


def plugin_delete(*, plugin: Plugin, user: Any) -> None:
    """Remove a registered plugin (for its owner or an admin of its project, as for jobs). Jobs that
    ran it keep their spec and code: the plugin's bundle stays while anything uses it."""
    if not can_control_job(user, plugin):
        raise PermissionDenied(f"plugin {plugin.name!r} of project {plugin.project.name} is "
                               f"{plugin.owner.get_username()}'s: only they or an admin of the project may delete it.")
    with transaction.atomic():
        audit.record(None, audit.Action.PLUGIN_DELETE, plugin, version=plugin.version, bundle=plugin.bundle.sha256)
        plugin.delete()


def _builtin_entrypoint(name: str) -> str | None:
    entrypoint = name if name.endswith(".py") else f"examples/{name}.py"
    return entrypoint if entrypoint in builtin_recipes() else None


def plugin_job_parts(*, name: str, project: str, user: Any) -> dict[str, Any]:
    """What a JobSpec needs to run the plugin `name` for `user` in `project`: a built-in recipe's
    entrypoint, or a registered plugin's bundle and entrypoint under launcher accelerate with its
    default config. Unknown: a 400 on plugin_name naming the plugins there are."""
    entrypoint = _builtin_entrypoint(name)
    if entrypoint is not None:
        return {"entrypoint": entrypoint, "default_config": {}}
    visible = plugins_visible_to(user)
    plugin = visible.filter(project__name=project, name=name).first()
    if plugin is None:
        elsewhere = sorted(visible.filter(name=name).values_list("project__name", flat=True))
        if elsewhere:
            raise serializers.ValidationError({"plugin_name": [
                f"plugin {name!r} is registered in project {', '.join(elsewhere)}, not in {project!r}; "
                "give that project (`project`)."]})
        registered = sorted(visible.filter(project__name=project).values_list("name", flat=True))
        builtin = sorted(builtin_name(e) for e in builtin_recipes())
        raise serializers.ValidationError({"plugin_name": [
            f"unknown plugin {name!r}; registered in project {project}: {', '.join(registered) or 'none'}; "
            f"built-in: {', '.join(builtin)}. Register one with `torchyard plugin push DIR` (POST /api/plugins)."]})
    # Whoever may run the plugin may run its code: the job's validation asks for a bundle of theirs.
    plugin.bundle.owners.add(user)
    return {"entrypoint": plugin.entrypoint, "code": {"bundle": plugin.bundle.sha256},
            "distributed": {"launcher": PLUGIN_LAUNCHER}, "default_config": dict(plugin.default_config)}


def plugin_of_spec(spec: JobSpec) -> Plugin | None:
    """The registered plugin a spec runs (its bundle and entrypoint under launcher accelerate), if any."""
    if spec.code is None or not spec.code.bundle or spec.distributed.launcher != PLUGIN_LAUNCHER:
        return None
    return Plugin.objects.filter(bundle__sha256=spec.code.bundle, entrypoint=spec.entrypoint,
                                 project__name=spec.project).order_by("-created_at").first()

from __future__ import annotations

from typing import Any

from rest_framework import serializers
from torchyard.plugin_manifest import NAME, NAME_RULE, check_entrypoint

from ..bundles.services import bundle_for_user
from ..jobs.intake.sections import refuse_nul_characters
from ..jobs.spec.recipes import builtin_recipes
from ..projects.models import DEFAULT_PROJECT
from ..projects.permissions import projects_visible_to, require_submit
from ..projects.selectors import project_by_name
from .selectors import builtin_name


class PluginIn(serializers.Serializer):
    """A plugin's manifest (torchyard-plugin.json's fields) and the bundle its directory was uploaded as."""

    name = serializers.RegexField(NAME, max_length=100, error_messages={"invalid": f"must be {NAME_RULE}."})
    version = serializers.CharField(max_length=50, default="0.0.0")
    description = serializers.CharField(max_length=5000, allow_blank=True, default="")
    entrypoint = serializers.CharField(max_length=500, default="main.py", help_text="its script, a path in the bundle")
    default_config = serializers.DictField(default=dict, validators=[refuse_nul_characters],
                                           help_text="settings a run's config overrides")
    bundle = serializers.RegexField(r"^[0-9a-f]{64}$", help_text="sha256 of the uploaded plugin directory",
                                    error_messages={"invalid": "must be the 64 hex digit sha256 of an uploaded bundle."})
    project = serializers.CharField(max_length=63, default=DEFAULT_PROJECT)

    def validate_name(self, value: str) -> str:
        if value in {builtin_name(entrypoint) for entrypoint in builtin_recipes()}:
            raise serializers.ValidationError(f"{value!r} is a built-in plugin's name; choose another.")
        return value

    def validate_entrypoint(self, value: str) -> str:
        try:
            return check_entrypoint(value)
        except ValueError as exc:
            raise serializers.ValidationError(str(exc)) from None

    def validate_project(self, value: str) -> Any:
        """Unknown, or not one of the pusher's: 400; one they only view: 403, as for jobs."""
        user = self.context["request"].user
        project = project_by_name(value)
        if project is None or not projects_visible_to(user).filter(pk=project.pk).exists():
            raise serializers.ValidationError(f"no project named {value!r} that you belong to.")
        require_submit(user, project)
        return project

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        bundle = bundle_for_user(sha256=attrs["bundle"], user=self.context["request"].user)
        if bundle is None:
            raise serializers.ValidationError({"bundle": [
                "no such bundle for this user; upload the plugin's directory first (PUT /api/bundles/{sha256}, "
                "or `torchyard plugin push DIR`)."]})
        if not bundle.has_file(attrs["entrypoint"]):
            raise serializers.ValidationError({"entrypoint": [f"{attrs['entrypoint']!r} is not a file of bundle {bundle}."]})
        attrs["bundle"] = bundle
        return attrs


class PluginOut(serializers.Serializer):
    name = serializers.CharField(help_text="what TransformerLab's routes take as plugin_name")
    version = serializers.CharField()
    description = serializers.CharField(allow_blank=True)
    entrypoint = serializers.CharField(help_text="its script: a path in its bundle, or a built-in recipe")
    default_config = serializers.DictField(help_text="settings a run's config overrides")
    builtin = serializers.BooleanField(help_text="a recipe shipped with Torchyard")
    bundle = serializers.CharField(allow_null=True, help_text="sha256 of its code; null for a built-in one")
    created_at = serializers.DateTimeField(allow_null=True, help_text="when this version was pushed; null for a built-in one")
    project = serializers.CharField(allow_null=True, help_text="the project it belongs to; null for a built-in one")

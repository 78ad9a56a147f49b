from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class Plugin(models.Model):
    """A registered plugin: its manifest's fields and the bundle that holds its directory. One per
    name in a project; pushing the name again replaces it (a new version)."""

    name = models.CharField(max_length=100)
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="plugins")
    version = models.CharField(max_length=50)
    description = models.TextField(blank=True)
    entrypoint = models.CharField(max_length=500, help_text="its script, a path in the bundle")
    default_config = models.JSONField(default=dict, blank=True, help_text="settings a run's config overrides")
    bundle = models.ForeignKey("bundles.Bundle", on_delete=models.PROTECT, related_name="plugins")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="plugins")
    # When this version was pushed (a push of a new version moves it).
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["name", "project_id"]
        constraints = [models.UniqueConstraint(fields=["project", "name"], name="one_plugin_per_name_in_a_project")]

    def __str__(self) -> str:
        return f"plugin {self.name} {self.version}"

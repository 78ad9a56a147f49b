from __future__ import annotations

from django.conf import settings
from django.db import models


class Bundle(models.Model):
    """An uploaded code bundle, named by the sha256 of its archive. The bytes live in the store
    (`bundles/<sha256>.tar.zst`); a user may run it once they uploaded those bytes themselves."""

    sha256 = models.CharField(max_length=64, unique=True)
    size = models.BigIntegerField(help_text="Archive bytes.")
    unpacked_size = models.BigIntegerField()
    files = models.JSONField(default=list, help_text='[{"path", "size", "mode"}], symlinks included')
    owners = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="bundles")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return self.sha256[:12]

    @property
    def storage_name(self) -> str:
        return f"{self.sha256}.tar.zst"

    def has_file(self, path: str) -> bool:
        return any(entry.get("path") == path and not entry.get("link") for entry in self.files)

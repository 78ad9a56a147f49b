"""API tokens: django-rest-knox's hashed, expiring tokens, with the name their owner gives them."""

from __future__ import annotations

from django.db import models
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS


class ApiToken(AbstractAuthToken):
    """Knox's token model (settings.KNOX_TOKEN_MODEL) with a name, a last use and a small integer
    id: knox keys its rows by the token's digest, which an API must never hand out."""

    id = models.BigAutoField(primary_key=True)
    digest = models.CharField(max_length=CONSTANTS.DIGEST_LENGTH, unique=True)
    name = models.CharField(max_length=100)
    last_used = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.user})"

    @property
    def prefix(self) -> str:
        """The token's first characters, enough to tell tokens apart (knox keeps 15 in clear to
        look a token up; 8 of 64 hex characters leave 224 bits unknown)."""
        return self.token_key[:8]

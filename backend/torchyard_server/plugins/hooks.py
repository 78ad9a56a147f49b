"""What the plugins app answers through the jobs app's registries; registered in apps.py."""

from __future__ import annotations

from typing import Any

from ..jobs.registries import SharedBundleLookup
from .selectors import plugin_bundle_for


class PluginBundles(SharedBundleLookup):
    """Whoever may run a plugin may run its code."""

    type = "plugins"

    def bundle_for(self, sha256: str, user: Any) -> Any:
        return plugin_bundle_for(sha256, user)

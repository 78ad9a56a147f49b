from django.apps import AppConfig


class PluginsConfig(AppConfig):
    """Plugins (seed 000): a TransformerLab-style training plugin registered under a name in a project,
    its code an uploaded bundle; the built-in recipes are plugins shipped with Torchyard. Above jobs,
    whose spec validation it feeds; the seed's routes (app `network`) run plugins by name."""

    name = "torchyard_server.plugins"
    label = "plugins"

    def ready(self) -> None:
        from ..jobs.registries import register_shared_bundle_lookup
        from .selectors import plugin_bundle_for

        register_shared_bundle_lookup(plugin_bundle_for)

from django.apps import AppConfig


class PluginsConfig(AppConfig):
    """Plugins (TransformerLab): a TransformerLab-style training plugin registered under a name in a project,
    its code an uploaded bundle; the built-in recipes are plugins shipped with Torchyard. Above jobs,
    whose spec validation it feeds; the seed's routes (app `network`) run plugins by name."""

    name = "torchyard_server.plugins"
    label = "plugins"

    def ready(self) -> None:
        from ..jobs.registries import shared_bundle_lookups
        from .hooks import PluginBundles

        shared_bundle_lookups.register(PluginBundles())

from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "torchyard_server.artifacts"
    label = "artifacts"

    def ready(self) -> None:
        from ..jobs.registries import event_appliers
        from . import hooks

        event_appliers.register(hooks.ArtifactApplier())
        event_appliers.register(hooks.FunctionResultApplier())

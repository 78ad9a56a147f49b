from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "torchyard_server.checkpoints"
    label = "checkpoints"

    def ready(self) -> None:
        from ..jobs.registries import checkpoint_times, event_appliers, resume_lookups
        from . import hooks

        # jobs asks through its registries: it sits below this app and does not import it.
        resume_lookups.register(hooks.NewestGoodManifest())
        checkpoint_times.register(hooks.LastCommits())
        event_appliers.register(hooks.CheckpointApplier())

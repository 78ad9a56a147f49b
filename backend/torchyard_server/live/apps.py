from django.apps import AppConfig


class LiveConfig(AppConfig):
    """An app without models: what it needs of Django is ready(), to register its hooks."""

    name = "torchyard_server.live"
    label = "live"

    def ready(self) -> None:
        from ..jobs.registries import queue_listeners
        from ..streaming.registries import batch_listeners
        from .broadcast import Broadcast
        from .queue import QueueBroadcast

        batch_listeners.register(Broadcast())
        queue_listeners.register(QueueBroadcast())

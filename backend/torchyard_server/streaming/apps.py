from django.apps import AppConfig


class StreamingConfig(AppConfig):
    name = "torchyard_server.streaming"
    label = "streaming"

    def ready(self) -> None:
        from ..jobs.registries import register_queue_listener
        from .queue import broadcast_queue

        register_queue_listener(broadcast_queue)

from django.apps import AppConfig


class StreamingConfig(AppConfig):
    name = "torchyard_server.streaming"
    label = "streaming"

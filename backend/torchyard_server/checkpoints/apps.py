from django.apps import AppConfig


class CheckpointsConfig(AppConfig):
    name = "torchyard_server.checkpoints"
    label = "checkpoints"

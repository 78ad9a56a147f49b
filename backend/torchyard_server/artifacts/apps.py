from django.apps import AppConfig


class ArtifactsConfig(AppConfig):
    name = "torchyard_server.artifacts"
    label = "artifacts"

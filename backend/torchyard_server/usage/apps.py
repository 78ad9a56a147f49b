from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "torchyard_server.usage"
    label = "usage"

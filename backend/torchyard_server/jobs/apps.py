from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "torchyard_server.jobs"
    label = "jobs"

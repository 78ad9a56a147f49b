from django.apps import AppConfig


class MachinesConfig(AppConfig):
    name = "torchyard_server.machines"
    label = "machines"

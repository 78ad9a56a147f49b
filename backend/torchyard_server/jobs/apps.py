from django.apps import AppConfig


class JobsConfig(AppConfig):
    name = "torchyard_server.jobs"
    label = "jobs"

    def ready(self) -> None:
        from ..machines.services import machine_deleting
        from .services import nodes_on_removed_machine

        machine_deleting.connect(nodes_on_removed_machine, dispatch_uid="jobs.nodes_on_removed_machine")

from django.apps import AppConfig
from django.core import checks


class JobsConfig(AppConfig):
    name = "torchyard_server.jobs"
    label = "jobs"

    def ready(self) -> None:
        from ..machines.registries import register_usage_lookup
        from ..machines.services import machine_deleting
        from ..projects.registries import register_held_lookup, register_project_changed
        from .policies import default_policy_check
        from .queue_poke import queue_poke_on_commit
        from .quotas import held_by_project
        from .selectors import usage_by_machine
        from .services import nodes_on_removed_machine

        machine_deleting.connect(nodes_on_removed_machine, dispatch_uid="jobs.nodes_on_removed_machine")
        register_usage_lookup(usage_by_machine)
        register_held_lookup(held_by_project)
        register_project_changed(queue_poke_on_commit)
        checks.register(default_policy_check)

from django.apps import AppConfig
from django.core import checks


class JobsConfig(AppConfig):
    name = "torchyard_server.jobs"
    label = "jobs"

    def ready(self) -> None:
        from ..machines.registries import machine_removals, usage_lookups
        from ..projects.registries import held_lookups, project_change_listeners
        from . import hooks
        from .placement.policies import default_policy_check
        from .registries import event_appliers

        machine_removals.register(hooks.LiveNodesOnRemovedMachine())
        usage_lookups.register(hooks.NodeUsage())
        held_lookups.register(hooks.NodesHeld())
        project_change_listeners.register(hooks.QueuePassOnProjectChange())
        for applier in (hooks.NodeStateApplier(), hooks.ProgressApplier(), hooks.StallApplier(), hooks.PaceApplier(),
                        hooks.LinksApplier()):
            event_appliers.register(applier)
        checks.register(default_policy_check)

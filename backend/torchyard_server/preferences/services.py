from __future__ import annotations

from typing import Any

from django.db import transaction

from .models import DistributedPreferences, PreferredMachine


def distributed_preferences_of(user: Any) -> DistributedPreferences:
    """The user's saved preferences, or the defaults (unsaved) when they never saved any."""
    found = DistributedPreferences.objects.filter(user=user).first()
    return found if found is not None else DistributedPreferences(user=user)


def preferred_machines_of(preferences: DistributedPreferences) -> list[tuple[int, str]]:
    """(id, name) of the preferred machines, in the user's order."""
    if preferences.pk is None:
        return []
    return [(pm.machine_id, pm.machine.name) for pm in preferences.machines.select_related("machine")]


@transaction.atomic
def distributed_preferences_set(*, user: Any, preferred_machines: list[int], default_num_machines: int,
                                default_procs_per_machine: int, default_gpus_per_machine: int,
                                auto_machine_selection: bool) -> DistributedPreferences:
    """Replaces the user's preferences as a whole (the machines' ids were checked by the caller)."""
    preferences, _ = DistributedPreferences.objects.update_or_create(user=user, defaults={
        "default_num_machines": default_num_machines,
        "default_procs_per_machine": default_procs_per_machine,
        "default_gpus_per_machine": default_gpus_per_machine,
        "auto_machine_selection": auto_machine_selection,
    })
    preferences.machines.all().delete()
    PreferredMachine.objects.bulk_create([
        PreferredMachine(preferences=preferences, machine_id=machine_id, position=position)
        for position, machine_id in enumerate(preferred_machines)
    ])
    return preferences

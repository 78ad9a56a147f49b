from __future__ import annotations

from rest_framework import serializers

from ..machines.models import Machine

# JobSpec's own limits (jobs.spec): a saved default always makes a valid spec.
MAX_MACHINES = 256
MAX_PROCS_PER_MACHINE = 64
MAX_GPUS_PER_MACHINE = 64


class DistributedPreferencesIn(serializers.Serializer):
    """TransformerLab's DistributedPreferences, replaced as a whole by each save."""

    preferred_machines = serializers.ListField(
        child=serializers.IntegerField(min_value=1), max_length=MAX_MACHINES, default=list,
        help_text="Machine ids, in order (the first would host the master): where manual selection starts.")
    default_num_machines = serializers.IntegerField(min_value=1, max_value=MAX_MACHINES)
    default_procs_per_machine = serializers.IntegerField(min_value=1, max_value=MAX_PROCS_PER_MACHINE)
    default_gpus_per_machine = serializers.IntegerField(min_value=0, max_value=MAX_GPUS_PER_MACHINE)
    auto_machine_selection = serializers.BooleanField(
        help_text="true: the planner chooses the machines; false: the user picks them, starting from the preferred ones.")

    def validate_preferred_machines(self, ids: list[int]) -> list[int]:
        errors = [f"{i} is listed twice." for n, i in enumerate(ids) if i in ids[:n]]
        # Every signed-in user sees the whole cluster and may place jobs on any machine of it.
        known = set(Machine.objects.filter(pk__in=ids).values_list("pk", flat=True))
        errors += [f"no such machine: {i}." for i in dict.fromkeys(ids) if i not in known]
        if errors:
            raise serializers.ValidationError(errors)
        return ids


class DistributedPreferencesOut(serializers.Serializer):
    preferred_machines = serializers.ListField(child=serializers.IntegerField(), help_text="Machine ids, in order.")
    preferred_machine_names = serializers.ListField(
        child=serializers.CharField(), help_text="The same machines' names, in the same order (JobSpec places by name).")
    default_num_machines = serializers.IntegerField()
    default_procs_per_machine = serializers.IntegerField()
    default_gpus_per_machine = serializers.IntegerField()
    auto_machine_selection = serializers.BooleanField()
    updated_at = serializers.DateTimeField(allow_null=True, help_text="null: never saved, these are the defaults.")

from __future__ import annotations

from django.conf import settings
from django.db import models


class DistributedPreferences(models.Model):
    """TransformerLab's DistributedPreferences: what a user's New job form starts from. One row per user,
    made on their first save; a user without one gets the defaults below."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                                related_name="distributed_preferences")
    # The limits are JobSpec's (jobs.intake.sections.ResourcesSerializer), so a saved default always makes a valid spec.
    default_num_machines = models.PositiveSmallIntegerField(default=2)
    default_procs_per_machine = models.PositiveSmallIntegerField(default=1)
    default_gpus_per_machine = models.PositiveSmallIntegerField(default=0)
    auto_machine_selection = models.BooleanField(
        default=True, help_text="Let the planner choose the machines; otherwise start from the preferred ones.")
    preferred_machines = models.ManyToManyField("machines.Machine", through="PreferredMachine", blank=True,
                                                related_name="+")
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "distributed preferences"
        verbose_name_plural = "distributed preferences"

    def __str__(self) -> str:
        return f"distributed preferences of {self.user}"


class PreferredMachine(models.Model):
    """One preferred machine, in the user's order (the first would host the master). Removing the
    machine removes it from everyone's preferences."""

    preferences = models.ForeignKey(DistributedPreferences, on_delete=models.CASCADE, related_name="machines")
    machine = models.ForeignKey("machines.Machine", on_delete=models.CASCADE, related_name="+")
    position = models.PositiveSmallIntegerField()

    class Meta:
        ordering = ["position"]
        constraints = [
            models.UniqueConstraint(fields=["preferences", "machine"], name="preferred_machine_once"),
        ]

    def __str__(self) -> str:
        return f"{self.machine} ({self.position})"

"""A sweep (a search over hyperparameters) and its trials, each a Torchyard job. The searcher's own
state, Optuna's study, lives in the same database in Optuna's tables (study.py)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Sweep(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"  # asking trials and running them, max_concurrent at a time
        STOPPING = "stopping"  # stop asked: its running trials are being stopped
        STOPPED = "stopped"  # stopped by its user; `resume` runs it on where it was
        COMPLETED = "completed"  # every trial asked and ended
        FAILED = "failed"  # more trials failed than searcher.max_failures allows, or a trial cannot run

    name = models.CharField(max_length=200)
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="sweeps")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sweeps")
    # As accepted (sweeps/spec.py): name, project, trial (a JobSpec without its name), space, searcher.
    spec = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    reason = models.CharField(max_length=1000, blank=True, help_text="why it stopped, failed or completed")
    study_name = models.CharField(max_length=100, unique=True, help_text="Optuna's study of this sweep")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"sweep {self.pk} {self.name}"


class Trial(models.Model):
    class Status(models.TextChoices):
        RUNNING = "running"  # its job is queued or running
        COMPLETED = "completed"  # its job completed and reported the metric
        PRUNED = "pruned"  # stopped early: the searcher's rung comparison said so (`reason`)
        FAILED = "failed"  # its job failed, or completed without reporting the metric
        STOPPED = "stopped"  # stopped with its sweep (or by hand); a resumed sweep runs its hyperparameters again

    sweep = models.ForeignKey(Sweep, on_delete=models.CASCADE, related_name="trials")
    number = models.PositiveIntegerField(help_text="Optuna's trial number in the sweep's study")
    optuna_trial_id = models.PositiveIntegerField()
    job = models.OneToOneField("jobs.Job", on_delete=models.SET_NULL, null=True, blank=True, related_name="trial")
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.RUNNING, db_index=True)
    value = models.FloatField(null=True, blank=True, help_text="the metric's last reported value")
    step = models.PositiveIntegerField(null=True, blank=True, help_text="the step it was last reported at")
    reason = models.CharField(max_length=1000, blank=True)
    # The newest metric event already reported to the searcher (streaming's JobEvent id).
    last_event_id = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["sweep_id", "number"]
        constraints = [models.UniqueConstraint(fields=["sweep", "number"], name="one_trial_per_number")]

    def __str__(self) -> str:
        return f"trial {self.number} of sweep {self.sweep_id}"

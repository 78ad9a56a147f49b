from __future__ import annotations

from typing import TypedDict

from django.conf import settings
from django.db import models


class NodeUsage(models.Model):
    """What one node of a job held, from the moment it ran to its end: the ledger of GPU- and
    process-seconds (DESIGN.md section 14). Written by the jobs app's node transitions, one row per
    node that ever ran, closed when the node ends. The node, job, user, project and machine are named
    as well as referenced: the ledger outlives deleted and purged jobs, removed machines and users,
    so last week's usage never changes after the fact."""

    node_id = models.BigIntegerField(unique=True)
    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField(default=0)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+")
    username = models.CharField(max_length=150)
    project = models.ForeignKey("projects.Project", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+")
    project_name = models.CharField(max_length=63, db_index=True)
    machine = models.ForeignKey("machines.Machine", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+")
    machine_name = models.CharField(max_length=100)
    gpus = models.PositiveIntegerField(default=0)
    processes = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(db_index=True)
    # Null while the node runs.
    ended_at = models.DateTimeField(null=True, blank=True, db_index=True)
    # gpus and processes times (ended_at - started_at), written when the row is closed, so totals
    # (the /metrics counters) add closed rows up in the database.
    gpu_seconds = models.FloatField(default=0.0)
    process_seconds = models.FloatField(default=0.0)

    class Meta:
        ordering = ["started_at", "id"]
        verbose_name_plural = "node usage"

    def __str__(self) -> str:
        return f"node {self.node_id} of job {self.job_id} on {self.machine_name}: {self.gpus} GPUs, {self.processes} processes"


class LedgerAttempt(TypedDict):
    """One attempt of a JobGoodput's `attempts`: its split, and where its nodes ran."""

    attempt: int
    start: float  # epoch seconds
    end: float
    parts: dict[str, float]  # {category: seconds}
    machines: list[str]  # the names of its nodes' machines


class JobGoodput(models.Model):
    """The goodput ledger (DESIGN.md section 15): one ended job's wall time split into what it went
    to (queued, training, recovery, lost work...; reports/goodput.py computes it from the job's
    events), written once the job has ended and its last events are in. Like NodeUsage it names the
    job, project and user as well as referencing them, and outlives them: the /metrics counters
    and past roll-ups do not change when a job is purged."""

    job_id = models.BigIntegerField(unique=True)
    job_name = models.CharField(max_length=200)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                             related_name="+")
    username = models.CharField(max_length=150)
    project = models.ForeignKey("projects.Project", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+")
    project_name = models.CharField(max_length=63, db_index=True)
    created_at = models.DateTimeField(help_text="The job's submission: where its wall time starts.")
    finished_at = models.DateTimeField(db_index=True)
    wall_seconds = models.FloatField()
    # {category: seconds}, every category of reports/goodput.py CATEGORIES.
    parts = models.JSONField(default=dict)
    # [LedgerAttempt]
    attempts = models.JSONField(default=list)
    # Of the split's rules (reports/goodput.py RULES): an entry of older rules is computed again
    # while its job exists.
    rules = models.PositiveSmallIntegerField(default=1)
    computed_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["finished_at", "id"]
        verbose_name_plural = "job goodput"

    def __str__(self) -> str:
        return f"goodput of job {self.job_id} ({self.project_name})"

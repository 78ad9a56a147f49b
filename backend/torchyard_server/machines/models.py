from __future__ import annotations

import hashlib

from django.core.validators import MinValueValidator
from django.db import models


class Machine(models.Model):
    """A host that runs a Torchyard agent. `pending` until its agent first reports in."""

    class Status(models.TextChoices):
        PENDING = "pending"
        ONLINE = "online"
        BUSY = "busy"
        DRAINING = "draining"
        # A hang's verdict named a rank here as the one that held its job: nothing is placed here
        # until an operator releases it or its own health check passes after the probation.
        QUARANTINED = "quarantined"
        OFFLINE = "offline"

    name = models.CharField(max_length=100, unique=True)
    host = models.CharField(max_length=255, help_text="Address other nodes use to reach this machine.")
    port = models.PositiveIntegerField(default=8001)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    # The operator's intent, kept apart from the status: a draining machine that drops offline comes
    # back draining, not online.
    drained = models.BooleanField(default=False, help_text="No new nodes are placed here.")
    # The control plane's verdict, kept apart from the status like `drained`: a quarantined machine
    # that drops offline comes back quarantined (jobs/control/stalls.py quarantines the culprit's machine).
    quarantined_at = models.DateTimeField(null=True, blank=True, help_text=(
        "Since when nothing is placed here: a hang's verdict named one of its ranks (null: not quarantined)."))
    quarantine_reason = models.CharField(max_length=500, blank=True, help_text="Why it is quarantined.")
    quarantine_job = models.PositiveBigIntegerField(null=True, blank=True, help_text=(
        "The job whose hang named it (an id: the job may be deleted since)."))
    # From then on the controller asks its agent for a health check; a pass releases it, a failure
    # starts another probation. Null: only an operator releases it (TORCHYARD_QUARANTINE_PROBATION=0).
    probation_until = models.DateTimeField(null=True, blank=True, help_text=(
        "When its agent's health check may release it (null: only an operator does)."))
    # The last health check its agent ran: {"at", "ok", "checks": [{"name", "ok", "detail", "seconds"}]}.
    health = models.JSONField(default=dict, blank=True)
    # cpu_count, memory (bytes), disk_space (bytes), gpu_count, gpu_memory (MB), gpus [{index, name, memory_mb}]
    capabilities = models.JSONField(default=dict, blank=True)
    # cpu_usage, memory_usage (percent), gpu_usage [percent per GPU]
    current_load = models.JSONField(default=dict, blank=True)
    # What jobs' preflights measured on each of its interfaces, the latest per interface:
    # {interface: {"mb_per_s", "latency_ms", "pairs", "job", "measured_at"}} (jobs/links.py).
    measured_links = models.JSONField(default=dict, blank=True)
    labels = models.JSONField(default=dict, blank=True)
    # Volumes the operator declared here on the server ({name: absolute path}); the agent's own
    # (`--volume`) come in its heartbeat's capabilities. machines/volumes.py merges the two.
    volumes = models.JSONField(default=dict, blank=True)
    # What an hour here costs, as the operator sets it (any currency, one for every machine): the
    # goodput roll-ups (GET /api/usage/goodput) price each node's time with them. Null: not priced.
    price_per_gpu_hour = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)], help_text=(
        "What one GPU of this machine costs per hour; a node pays it for each GPU it holds."))
    price_per_machine_hour = models.FloatField(null=True, blank=True, validators=[MinValueValidator(0)], help_text=(
        "What the whole machine costs per hour (CPU machines); a node pays its share: its GPUs of the machine's, "
        "or without GPUs its processes of the machine's CPUs."))
    agent_version = models.CharField(max_length=64, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    token_hash = models.CharField(max_length=64, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @staticmethod
    def hash_secret(secret: str) -> str:
        return hashlib.sha256(secret.encode()).hexdigest()

    @property
    def is_schedulable(self) -> bool:
        return self.status in (self.Status.ONLINE, self.Status.BUSY)

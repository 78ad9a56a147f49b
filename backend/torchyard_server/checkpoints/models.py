from __future__ import annotations

from django.db import models


class CheckpointManifest(models.Model):
    """A committed checkpoint: it exists for Torchyard once its manifest is committed and recorded."""

    class Tier(models.TextChoices):
        # The store's (file:// or S3): durable, what survives every machine of the job.
        DISK = "disk"
        # Held in the agents' memory, the saving machine's and its buddies' (checkpointing.memory):
        # it survives as long as one of the machines its files name lives.
        MEMORY = "memory"

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="checkpoints")
    step = models.PositiveIntegerField()
    attempt = models.PositiveIntegerField(default=0)
    uri = models.CharField(max_length=1000, help_text="URI of manifest.json")
    world_size = models.PositiveIntegerField(null=True, blank=True)
    tier = models.CharField(max_length=8, choices=Tier.choices, default=Tier.DISK)
    files = models.JSONField(default=list)  # [{path, size, sha256}], memory files also with their holders
    total_bytes = models.BigIntegerField(default=0)
    manifest = models.JSONField(default=dict)
    committed_at = models.DateTimeField()
    verified = models.BooleanField(default=True, help_text="False once a restore found its files corrupt.")
    deleted = models.BooleanField(default=False, help_text="Removed by retention.")
    # What the save cost the training loop, from the manifest's "save" section (null for
    # checkpoints of SDKs that did not record it).
    saved_async = models.BooleanField(default=False, help_text="Written in the background (async_=True).")
    blocking_seconds = models.FloatField(
        null=True, blank=True, help_text="How long save() held the training loop (the slowest rank)."
    )
    background_seconds = models.FloatField(
        null=True, blank=True, help_text="Async saves: from save() returning until the commit."
    )

    class Meta:
        ordering = ["job_id", "-step"]
        constraints = [models.UniqueConstraint(fields=["job", "uri"], name="one_row_per_manifest")]

    def __str__(self) -> str:
        return f"job {self.job_id} step {self.step}"

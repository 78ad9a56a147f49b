from __future__ import annotations

from django.db import models


class Artifact(models.Model):
    """One file a node wrote under $TORCHYARD_OUTPUT_DIR, collected into the store when it ended."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="artifacts")
    attempt = models.PositiveIntegerField()
    node_rank = models.PositiveIntegerField()
    path = models.CharField(max_length=1000, help_text="Relative to the node's output directory.")
    size = models.BigIntegerField()
    sha256 = models.CharField(max_length=64)
    uri = models.CharField(max_length=2000)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job_id", "attempt", "node_rank", "path"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node_rank", "path"], name="one_artifact_per_path"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} node {self.node_rank}: {self.path}"

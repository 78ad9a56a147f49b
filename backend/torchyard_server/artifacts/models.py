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


class FunctionResult(models.Model):
    """What one rank of a function job (torchyard.fn) returned or raised, for one attempt.

    The value itself (pickled by value) lies in the store at `uri`; the API shows `repr` and the
    exception's text without unpickling anything, and hands the pickle to whoever may see the job."""

    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="function_results")
    attempt = models.PositiveIntegerField()
    rank = models.PositiveIntegerField(help_text="global rank")
    node_rank = models.PositiveIntegerField()
    machine_name = models.CharField(max_length=100, blank=True)
    ok = models.BooleanField(help_text="returned (true), or raised / could not return (false)")
    size = models.BigIntegerField(default=0, help_text="bytes of the pickle (0: none to unpickle)")
    sha256 = models.CharField(max_length=64, blank=True)
    uri = models.CharField(max_length=2000, blank=True)
    repr = models.TextField(blank=True, help_text="repr() of the return value, cut at 2,000 characters")
    error_type = models.CharField(max_length=200, blank=True)
    error = models.TextField(blank=True)
    traceback = models.TextField(blank=True, help_text="the remote traceback's text")
    raised_at = models.DateTimeField(null=True, blank=True, help_text="when the rank raised, by its machine's clock")
    peer_failure = models.BooleanField(
        default=False, help_text="what it raised says another rank went away (a consequence, not the cause)")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["job_id", "attempt", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "rank"], name="one_result_per_rank_and_attempt"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} rank {self.rank}: {'ok' if self.ok else self.error_type}"

from __future__ import annotations

from django.conf import settings
from django.db import models


class RankDispatch(models.Model):
    """One rank of TransformerLab's per-rank dispatch (`POST /api/network/distributed_jobs/dispatch` with
    `rank` and `target_machine`), kept until every rank of the caller's job is in; then the whole
    job is submitted with each rank on its machine, and every row points to it."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=100, help_text="the caller's job_id (the seed's \"dist_job_123\")")
    rank = models.PositiveIntegerField(help_text="the node's rank (the seed's machine rank)")
    world_size = models.PositiveIntegerField(help_text="the seed's world size: machines")
    machine = models.ForeignKey("machines.Machine", on_delete=models.CASCADE, related_name="+")
    # The rank's DistributedTrainingConfig as validated: every rank of one job must send the same.
    config = models.JSONField()
    # The master_addr the rank's body named, if any: it must name rank 0's machine (Torchyard's
    # master), checked as soon as rank 0's machine is known.
    master_addr = models.CharField(max_length=255, blank=True)
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["owner_id", "key", "rank"]
        constraints = [models.UniqueConstraint(fields=["owner", "key", "rank"], name="one_dispatch_per_rank")]

    def __str__(self) -> str:
        return f"{self.key} rank {self.rank}/{self.world_size} on machine {self.machine_id}"


class NamedJob(models.Model):
    """A whole job submitted under the caller's own TransformerLab job_id (a DistributedTrainingConfig
    dispatched with `"job_id": "dist_job_123"`, or execute_job's `job_id`): the id its status and stop
    routes take. One row per owner and id, pointing to the newest job submitted under it; a second
    job takes the id only once the first has ended."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    key = models.CharField(max_length=100, help_text='the caller\'s job_id (the seed\'s "dist_job_123")')
    job = models.ForeignKey("jobs.Job", on_delete=models.CASCADE, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["owner_id", "key"]
        constraints = [models.UniqueConstraint(fields=["owner", "key"], name="one_named_job_per_id")]

    def __str__(self) -> str:
        return f"{self.key}: job {self.job_id}"

from __future__ import annotations

from django.conf import settings
from django.db import models

from ..projects.models import default_project_pk


class Job(models.Model):
    """A distributed training job. Its `spec` is a validated JobSpec; `plan` is the current attempt's."""

    class Status(models.TextChoices):
        QUEUED = "queued"
        PLANNING = "planning"
        DISPATCHING = "dispatching"
        RUNNING = "running"
        RECOVERING = "recovering"
        # Lossless preemption (jobs/placement/queue.py): asked to checkpoint and yield its GPUs to a job of
        # higher priority (or to a project reclaiming its quota); then waiting in the queue again.
        PREEMPTING = "preempting"
        PREEMPTED = "preempted"
        STOPPING = "stopping"
        COMPLETED = "completed"
        FAILED = "failed"
        STOPPED = "stopped"

    name = models.CharField(max_length=200)
    spec = models.JSONField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED, db_index=True)
    status_reason = models.TextField(blank=True)
    plan = models.JSONField(null=True, blank=True)
    world_size = models.PositiveIntegerField(null=True, blank=True)
    master_addr = models.CharField(max_length=255, blank=True)
    master_port = models.PositiveIntegerField(null=True, blank=True)
    # 0 for the first launch, +1 per relaunch.
    attempt = models.PositiveIntegerField(default=0)
    # Relaunches caused by failures, counted against fault_tolerance.max_restarts (a relaunch after
    # Torchyard itself was shut down does not count).
    restarts = models.PositiveIntegerField(default=0)
    # step, total_steps, throughput, loss, eta_seconds: the latest known, for lists and summaries.
    progress = models.JSONField(default=dict, blank=True)
    # The link matrix the master's preflight measured between the job's machines (jobs/links.py),
    # kept across attempts: a relaunch on measured machines reuses its choice of network.
    links = models.JSONField(default=dict, blank=True)
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="jobs",
                                default=default_project_pk)
    # The queue (jobs/placement/queue.py): higher first, then by submission (created_at). The spec's priority
    # at submission; changed by PATCH /api/jobs/{id} since (audited).
    priority = models.IntegerField(default=0, db_index=True)
    # When the job last entered `queued` (submitted, or sent back by a recovery that found no room).
    queued_at = models.DateTimeField(null=True, blank=True)
    # Holds more than its project's quota leaves it (started on idle capacity, the project's `borrow`):
    # what preemption takes back first. Kept current by every queue pass.
    borrowing = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["status", "-priority", "created_at"], name="job_queue_order")]

    def __str__(self) -> str:
        return f"#{self.pk} {self.name}"


class JobNode(models.Model):
    """One node (one torchrun on one machine) of one attempt of a job."""

    class Status(models.TextChoices):
        PENDING = "pending"
        LAUNCHING = "launching"
        PREPARING = "preparing"  # fetching the code, building its environment
        RUNNING = "running"
        COMPLETED = "completed"
        FAILED = "failed"
        LOST = "lost"
        STOPPED = "stopped"

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="nodes")
    attempt = models.PositiveIntegerField()
    machine = models.ForeignKey("machines.Machine", on_delete=models.SET_NULL, null=True, related_name="nodes")
    machine_name = models.CharField(max_length=100, help_text="Kept when the machine row is deleted.")
    host = models.CharField(max_length=255)
    node_rank = models.PositiveIntegerField()
    nproc = models.PositiveIntegerField()
    rank_start = models.PositiveIntegerField()
    rank_end = models.PositiveIntegerField()
    gpus = models.JSONField(default=list, blank=True)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING, db_index=True)
    status_reason = models.TextField(blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    last_heartbeat = models.DateTimeField(null=True, blank=True)
    progress = models.JSONField(default=dict, blank=True)
    error = models.JSONField(default=dict, blank=True, help_text=(
        "The Python exception a rank of this node failed with, as its supervisor reported it: type, message, "
        "the innermost frame of the user's code, the rank and its last step. Two attempts failing with the same "
        "one at the same step is no fault of the machines: the job is not retried again."))
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["job_id", "attempt", "node_rank"]
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt", "node_rank"], name="one_node_rank_per_attempt"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt} node {self.node_rank} on {self.machine_name}"

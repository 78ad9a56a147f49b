from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

DEFAULT_PROJECT = "default"
PROJECT_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Project(models.Model):
    """A group of jobs and the people who may see and run them."""

    name = models.CharField(max_length=63, unique=True, validators=[RegexValidator(PROJECT_NAME)])
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")
    # Sharing the cluster (DESIGN.md section 14; jobs/placement/queue.py). The highest priority its members and
    # admins may give a job (staff may give any): set by the project's admins, up to `high` (10);
    # only staff set it above.
    priority_ceiling = models.IntegerField(default=10, validators=[MinValueValidator(-100), MaxValueValidator(100)], help_text=(
        "the highest priority a job of the project may have (low -10, normal 0, high 10); staff are not capped"))
    # Quotas, set by staff: the most its running jobs may hold at once; null is no limit.
    max_gpus = models.PositiveIntegerField(null=True, blank=True, help_text=(
        "the most GPUs the project's running jobs may hold at once (empty: no limit)"))
    max_processes = models.PositiveIntegerField(null=True, blank=True, help_text=(
        "the most processes (ranks) the project's running jobs may run at once (empty: no limit)"))
    borrow = models.BooleanField(default=False, help_text=(
        "past its quota a job may still start on capacity nobody queued within quota needs; it is marked "
        "borrowing (what preemption takes back first)"))

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class Membership(models.Model):
    class Role(models.TextChoices):
        VIEWER = "viewer"  # sees the project's jobs, logs, metrics, checkpoints, artifacts
        MEMBER = "member"  # also submits jobs, stops and deletes its own
        ADMIN = "admin"  # stops and deletes any job of the project, manages its members

    project = models.ForeignKey(Project, on_delete=models.CASCADE, related_name="memberships")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=8, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["project_id", "user_id"]
        constraints = [models.UniqueConstraint(fields=["project", "user"], name="one_membership_per_user")]

    def __str__(self) -> str:
        return f"{self.user} {self.role} of {self.project}"


def default_project_pk() -> int:
    """Job.project's default: a job made without one (older code paths, tests) joins the default project."""
    # Reads the id alone: migrations of other apps call this (jobs 0004's default) before this
    # app's later columns exist.
    pk = Project.objects.filter(name=DEFAULT_PROJECT).values_list("pk", flat=True).first()
    if pk is None:
        project, _ = Project.objects.get_or_create(name=DEFAULT_PROJECT,
                                                   defaults={"description": "Everyone, from the first user on."})
        pk = project.pk
    return pk

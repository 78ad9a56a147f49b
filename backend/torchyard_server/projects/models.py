from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

DEFAULT_PROJECT = "default"
PROJECT_NAME = r"^[a-z0-9][a-z0-9._-]{0,62}$"


class Project(models.Model):
    """A group of jobs and the people who may see and run them."""

    name = models.CharField(max_length=63, unique=True, validators=[RegexValidator(PROJECT_NAME)])
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, through="Membership", related_name="projects")

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
    project, _ = Project.objects.get_or_create(name=DEFAULT_PROJECT, defaults={"description": "Everyone, from the first user on."})
    return project.pk

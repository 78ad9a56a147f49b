from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class AuditEntry(models.Model):
    """Who did what to what, and when. Written by `audit.services.record` from the services where
    the actions happen; never changed afterwards (read-only in the API and the admin)."""

    class Action(models.TextChoices):
        JOB_SUBMIT = "job.submit"
        JOB_STOP = "job.stop"
        JOB_DELETE = "job.delete"
        JOB_PRIORITY_CHANGE = "job.priority_change"
        MACHINE_ADD = "machine.add"
        MACHINE_UPDATE = "machine.update"  # host, port or labels
        MACHINE_DRAIN = "machine.drain"
        MACHINE_UNDRAIN = "machine.undrain"
        MACHINE_ROTATE_TOKEN = "machine.rotate_token"
        MACHINE_REMOVE = "machine.remove"
        MACHINE_QUARANTINE = "machine.quarantine"  # a hang's verdict named it (the system)
        MACHINE_RELEASE = "machine.release"  # an operator, or its health check after the probation
        PROJECT_CREATE = "project.create"
        PROJECT_UPDATE = "project.update"  # description, priority ceiling, quotas
        PROJECT_MEMBER_ADD = "project.member_add"
        PROJECT_MEMBER_ROLE_CHANGE = "project.member_role_change"
        PROJECT_MEMBER_REMOVE = "project.member_remove"
        TOKEN_CREATE = "token.create"
        TOKEN_REVOKE = "token.revoke"
        BUNDLE_UPLOAD = "bundle.upload"
        PLUGIN_PUSH = "plugin.push"  # a new plugin, or a new version of one
        PLUGIN_DELETE = "plugin.delete"

    created = models.DateTimeField(default=timezone.now, db_index=True)
    # The user, while the account exists; the label stays when it is deleted. Labels are a username,
    # "machine <id>" or "system" (the controller acting on its own).
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True,
                              related_name="+")
    actor_label = models.CharField(max_length=150, db_index=True)
    action = models.CharField(max_length=40, choices=Action.choices, db_index=True)
    # The target is named, not referenced: entries outlive the jobs and machines they are about.
    target_type = models.CharField(max_length=40)
    target_id = models.CharField(max_length=64)
    target_label = models.CharField(max_length=200, blank=True)
    project = models.ForeignKey("projects.Project", on_delete=models.SET_NULL, null=True, blank=True,
                                related_name="+")
    detail = models.JSONField(default=dict, blank=True)
    source_ip = models.GenericIPAddressField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        verbose_name_plural = "audit entries"
        indexes = [models.Index(fields=["target_type", "target_id"], name="audit_target")]

    def __str__(self) -> str:
        return f"{self.created:%Y-%m-%d %H:%M:%S} {self.actor_label} {self.action} {self.target_type} {self.target_label or self.target_id}"

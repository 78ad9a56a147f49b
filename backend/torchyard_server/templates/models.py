from __future__ import annotations

from django.conf import settings
from django.db import models


class JobTemplate(models.Model):
    """A validated JobSpec under a name (its `secret_env` values sealed, as in a job's spec). It
    belongs to a project, which decides who sees and submits it, as for jobs."""

    name = models.CharField(max_length=200)
    spec = models.JSONField()
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_templates")
    project = models.ForeignKey("projects.Project", on_delete=models.PROTECT, related_name="job_templates")
    # What became of it (services.template_submit records each job): TransformerLab's plan is a
    # template, and its job_id (`plan-<id>`) follows the newest of these. No reverse accessor: jobs
    # sit below templates and know nothing of them.
    jobs = models.ManyToManyField("jobs.Job", related_name="+", blank=True,
                                  help_text="the jobs submitted from it")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"template #{self.pk} {self.name}"

"""Saving job templates and submitting them. Specs arrive checked (jobs.intake.serializer.JobSpecSerializer)
and admitted for their saver (jobs.control.admission: the project, the bundles, sealed secrets); callers check who may change
or submit a template (projects.permissions)."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from rest_framework.exceptions import ValidationError

from ..bundles.models import Bundle
from ..jobs.control.submit import job_submit
from ..jobs.models import Job
from ..jobs.spec.jobspec import JobSpec
from ..projects.selectors import project_by_name
from .models import JobTemplate


def template_save(*, spec: dict[str, Any], owner: Any = None, template: JobTemplate | None = None) -> JobTemplate:
    """Create a template owned by `owner`, or replace `template`'s spec (its name is the spec's)."""
    project = project_by_name(spec["project"])
    if template is None:
        return JobTemplate.objects.create(name=spec["name"], spec=spec, owner=owner, project=project)
    template.name, template.spec, template.project = spec["name"], spec, project
    template.save(update_fields=["name", "spec", "project", "updated_at"])
    return template


def template_delete(*, template: JobTemplate) -> None:
    template.delete()


def on_one_machine(spec: dict[str, Any], machine_name: str) -> dict[str, Any]:
    """The whole job on one machine (TransformerLab's remote job): one node with every process of the
    job and its GPUs, so the world size and the hyperparameters' adjustment stay what was saved."""
    resources = dict(spec["resources"])
    if "workers" in resources:
        workers, per_worker = resources.pop("workers"), resources.pop("gpus_per_worker", 0)
        resources.update(procs_per_node=workers, gpus_per_node=workers * per_worker)
    else:
        nodes = resources["nodes"]
        resources.update(procs_per_node=nodes * resources["procs_per_node"],
                         gpus_per_node=nodes * resources.get("gpus_per_node", 0))
    resources["nodes"] = 1
    resources.pop("min_nodes", None)  # an elastic range: its most nodes, all on the one machine
    return {**spec, "resources": resources,
            "placement": {**spec["placement"], "policy": "pack", "machines": [machine_name]}}


def template_submit(*, template: JobTemplate, owner: Any, machine_name: str | None = None) -> Job:
    """Submit the template as a new job of `owner` (jobs.services.job_submit: refused with a
    PlanError when the machines can never hold it), on one machine when `machine_name` is given."""
    spec = {**template.spec, "name": template.name, "project": template.project.name}
    bundle = (spec.get("code") or {}).get("bundle")
    if bundle and not Bundle.objects.filter(sha256=bundle).exists():
        raise ValidationError({"code": {"bundle": [
            f"the task's code bundle {bundle[:12]} is no longer on the server; upload it again and save the task."]}})
    if machine_name is not None:
        spec = on_one_machine(spec, machine_name)
    # The job and the record that it came from this template, together or not at all.
    with transaction.atomic():
        job = job_submit(spec=JobSpec.from_json(spec), owner=owner)
        template_job_record(template=template, job=job)
    return job


def template_job_record(*, template: JobTemplate, job: Job) -> None:
    """Record that `job` was submitted from `template` (for a job its caller built from the
    template's spec itself, as a per-rank dispatch of a plan does)."""
    template.jobs.add(job)

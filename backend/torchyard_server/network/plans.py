"""Seed 000's UI flow: plan, then queue the plan's job. `distributed/plan` keeps the planned job as a
task (app `templates`) and answers its id as the plan's `job_id`; `/api/tasks/{job_id}/queue_distributed`
queues it, and `distributed/dispatch` takes it as `{"job_id": N}` (the whole job) or rank by rank
(`job_id`, `target_machine`, `rank`, `world_size`, the plan standing for the rest of the body)."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ..jobs.models import Job
from ..projects.permissions import require_submit
from ..projects.selectors import project_by_name
from ..templates.models import JobTemplate
from ..templates.selectors import template_visible_or_404
from ..templates.services import template_save, template_submit
from .seed import seed_config_of

# What a planned task stands for in a per-rank dispatch body (dispatch.RankDispatchIn's fields).
RANK_FIELDS = ("plugin_name", "config", "args", "project")
RANK_REQUIREMENTS = ("gpus_per_machine", "min_gpu_memory", "procs_per_machine")


def plan_keep(*, spec: dict[str, Any], owner: Any) -> JobTemplate:
    """The task this planned spec is kept as: the owner's identical one when there is one (planning
    again does not pile up tasks), else a new one."""
    project = project_by_name(spec["project"])
    same = JobTemplate.objects.filter(owner=owner, project=project, name=spec["name"], spec=spec).order_by("-id").first()
    return same if same is not None else template_save(spec=spec, owner=owner)


def is_planned_dispatch(body: Any) -> bool:
    """A whole-job dispatch that names a plan's job instead of carrying a DistributedTrainingConfig."""
    return isinstance(body, dict) and "job_id" in body and "plugin_name" not in body


def planned_task(*, user: Any, job_id: Any) -> JobTemplate:
    """The task a plan's job_id names (404 when this user may not see it); 400 for anything else."""
    text = str(job_id)
    if not text.isdigit() or len(text) > 18:  # beyond a bigint: no task has that id
        raise serializers.ValidationError({"job_id": [
            f"{text!r} is not the job_id of a plan (POST /api/network/distributed/plan answers one); "
            "or give plugin_name and the job's other fields."]})
    return template_visible_or_404(user=user, template_id=int(text))


def planned_job_submit(*, user: Any, job_id: Any) -> Job:
    task = planned_task(user=user, job_id=job_id)
    require_submit(user, task.project)
    return template_submit(template=task, owner=user)


def planned_rank_fields(*, user: Any, job_id: str) -> dict[str, Any]:
    """A per-rank dispatch body's job fields, from the plan its job_id names."""
    config = seed_config_of(planned_task(user=user, job_id=job_id).spec)
    return {**{key: config[key] for key in RANK_FIELDS},
            "resource_requirements": {key: config["resource_requirements"][key] for key in RANK_REQUIREMENTS}}

"""TransformerLab's UI flow: plan, then queue the plan's job. `distributed/plan` keeps the planned job
as a task (app `templates`) and answers `plan-<task id>` as the plan's `job_id`. The plan is queued
with `/api/tasks/{task_id}/queue_distributed` (or `/api/tasks/plan-{task_id}/queue_distributed`), or
with `distributed/dispatch` naming it, `{"job_id": "plan-12"}` (the whole job) or rank by rank
(`job_id`, `target_machine`, `rank`, `world_size`): the plan stands for the rest of the body, and any
of the job's fields the body gives too must say what the plan says.

Ids, the same on every route that takes a job_id (ids.py): digits are Torchyard's job ids,
`plan-<digits>` a plan's, anything else the name a per-rank dispatch gave its job."""

from __future__ import annotations

import re
from typing import Any

from rest_framework import serializers

from ...jobs.models import Job
from ...projects.permissions import require_submit
from ...projects.selectors import project_by_name
from ...templates.models import JobTemplate
from ...templates.selectors import template_visible_or_404
from ...templates.services import template_save, template_submit
from .payloads import DistributedTrainingConfig, seed_config_of

PLAN_ID = re.compile(r"plan-([0-9]{1,18})")  # beyond a bigint no task has that id

# A DistributedTrainingConfig's fields: what a plan stands for in a dispatch body.
PLAN_FIELDS = ("plugin_name", "config", "resource_requirements", "machine_selection", "selected_machines", "args",
               "project")


def plan_id(task: JobTemplate) -> str:
    return f"plan-{task.pk}"


def plan_number(job_id: Any) -> int | None:
    """The task id of a plan's job_id (`plan-12` -> 12); None for any other id."""
    found = PLAN_ID.fullmatch(job_id) if isinstance(job_id, str) else None
    return int(found.group(1)) if found else None


def is_torchyard_id(job_id: Any) -> bool:
    """Digits: Torchyard's job id, on every route (never a plan's, never a dispatch's name)."""
    return isinstance(job_id, int) or (isinstance(job_id, str) and job_id.isascii() and job_id.isdigit())


def own_id_refusal(job_id: str, *, takes_plans: bool = True) -> str | None:
    """Why a caller may not name its own job `job_id` (a per-rank dispatch's, a whole job's, execute_job's),
    in a sentence; None when it may. Digits are Torchyard's job ids and `plan-<digits>` a plan's on every
    route, and a `/` cannot travel in a route's path. `takes_plans`: whether the body may give a plan's
    job_id instead (dispatch's may; execute_job's runs its job_data, never a plan), which the advice says."""
    if is_torchyard_id(job_id):
        instead = "or give a plan's job_id (plan-12)" if takes_plans else "or leave job_id out"
        return (f"{job_id} is a Torchyard job id (digits name a submitted job on every route): name your job with "
                f"letters (dist_job_123), {instead}.")
    if (number := plan_number(job_id)) is not None:
        return (f"{job_id} is a plan's job_id (plan-<number>, which distributed/plan answers): it names the plan, "
                f"not a job of your own. Run the plan with POST /api/network/distributed/dispatch "
                f"{{\"job_id\": \"{job_id}\"}} (or POST /api/tasks/{number}/queue/{{machine_id}}: all of it on one "
                "machine), or name your own job otherwise (dist_job_123).")
    if "/" in job_id:
        return (f"{job_id!r} has a '/', which the status and stop routes' paths cannot carry: name your job "
                "without it (dist_job_123).")
    return None


def plan_keep(*, spec: dict[str, Any], owner: Any) -> JobTemplate:
    """The task this planned spec is kept as: the owner's identical one that was never queued, when
    there is one (planning again does not pile up tasks), else a new one. A plan already queued is
    not handed out again: its job_id follows the job it became."""
    project = project_by_name(spec["project"])
    same = (JobTemplate.objects.filter(owner=owner, project=project, name=spec["name"], spec=spec, jobs__isnull=True)
            .order_by("-id").first())
    return same if same is not None else template_save(spec=spec, owner=owner)


def is_planned_dispatch(body: Any) -> bool:
    """A whole-job dispatch that names a plan's job (`{"job_id": "plan-12"}`)."""
    return isinstance(body, dict) and "job_id" in body


def planned_task(*, user: Any, job_id: Any, otherwise: str) -> JobTemplate:
    """The task a plan's job_id names (404 when this user may not see it); 400 for any other id,
    saying what it is and `otherwise`, what the caller may send instead."""
    number = plan_number(job_id)
    if number is None:
        why = (f"{job_id} is a Torchyard job id (digits name a submitted job on every route)"
               if is_torchyard_id(job_id) else f"{job_id!r} is not the job_id of a plan")
        raise serializers.ValidationError({"job_id": [
            f"{why}; a plan's job_id reads plan-<number> (POST /api/network/distributed/plan answers one). {otherwise}"]})
    return template_visible_or_404(user=user, template_id=number)


class PlannedDispatchIn(DistributedTrainingConfig):
    """A whole-job dispatch of a plan: its job_id, and (taken partially: nothing is required, no
    default applies) whichever of the job's fields the caller repeats, each checked against the plan."""

    job_id = serializers.CharField(max_length=100, help_text="a plan's job_id, plan-12")
    plugin_name = serializers.CharField(max_length=200, required=False, help_text="the plan's, if given")
    machine_selection = serializers.ChoiceField(choices=["auto", "manual"], required=False, help_text="the plan's, if given")
    project = serializers.CharField(max_length=63, required=False, help_text="the plan's, if given")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        return attrs  # the fields given are compared with the plan's (plan_disagreements), not with each other


def given_fields(initial: Any, validated: dict[str, Any]) -> dict[str, Any]:
    """The validated values of the job's fields that the request's body itself gave (a default filled
    in by the serializer is not the caller's word); of resource_requirements, only the keys it gave."""
    given: dict[str, Any] = {}
    if not isinstance(initial, dict):
        return given
    for key in PLAN_FIELDS:
        if key not in initial or key not in validated:
            continue
        value = validated[key]
        if key == "resource_requirements":
            raw = initial[key] if isinstance(initial[key], dict) else {}
            value = {name: v for name, v in (value or {}).items() if name in raw}
        given[key] = value
    return given


def plan_disagreements(task: JobTemplate, given: dict[str, Any]) -> dict[str, list[str]]:
    """A field error for each field of `given` that says otherwise than the plan: a dispatch of a plan
    dispatches the plan, it does not change it (planning again does)."""
    planned = seed_config_of(task.spec)
    name, errors = plan_id(task), {}
    advice = "leave it out (the plan stands for it), or plan again to change it."
    for key, value in given.items():
        want = planned[key]
        if key == "plugin_name":
            agrees = value in {want, task.spec.get("entrypoint"), task.spec.get("module")}
        elif key in ("config", "resource_requirements"):
            differ = sorted(k for k, v in value.items() if k not in want or want[k] != v)
            if differ:
                said = ", ".join(f"{k} {want[k]!r}" if k in want else f"no {k}" for k in differ)
                errors[key] = [f"{name} says {said}: {advice}"]
            continue
        else:
            agrees = value == want
        if not agrees:
            errors[key] = [f"{name} says {key} {want!r}: {advice}"]
    return errors


def planned_job_submit(*, request: Any) -> tuple[JobTemplate, Job]:
    """Submit the plan a whole-job dispatch names (its other fields, if any, must agree with it)."""
    body = PlannedDispatchIn(data=request.data, partial=True)
    body.is_valid(raise_exception=True)
    task = planned_task(user=request.user, job_id=body.validated_data.get("job_id"), otherwise=(
        "Give plugin_name and the job's other fields to submit the job under a job_id of your own (letters: "
        "dist_job_123), leave job_id out for Torchyard's id alone, or add rank and target_machine to dispatch it "
        "rank by rank."))
    errors = plan_disagreements(task, given_fields(request.data, body.validated_data))
    if errors:
        raise serializers.ValidationError(errors)
    require_submit(request.user, task.project)
    return task, template_submit(template=task, owner=request.user)

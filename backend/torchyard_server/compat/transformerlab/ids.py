"""One reading of a TransformerLab `job_id` for every route that takes one (`distributed/status/{id}`,
`distributed/stop/{id}`, `distributed_jobs/{id}/status`, `machines/{machine_id}/job_status/{id}`,
`machines/{machine_id}/stop_job/{id}`, `local_job_status/{id}`, `local_job_output/{id}`,
`local_job_file/{id}/{key}`):

- digits (`57`): Torchyard's job id, as `/api/jobs/57`;
- `plan-<digits>` (`plan-12`): the job a plan became. The newest job submitted from the plan's task
  (queue_distributed, dispatch of the plan, or its ranks once every one came); before that the ranks
  of a per-rank dispatch of the plan still coming in; before anything, the plan itself (`planned`);
- anything else (`dist_job_123`): the name this user gave a job of theirs, dispatched rank by rank
  or whole (a DistributedTrainingConfig with its own job_id, or execute_job's job_id): the newest
  job of that name, or its ranks while they are still coming in.

Digits stay Torchyard's job ids everywhere (the routes took only those before), so a plan answers
its id with the `plan-` prefix, and no job of a user's may be named with digits. An id that names
nothing this user may see is a 404 naming it; one over 100 characters a 400 on `job_id`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import NotFound

from ...jobs.control.stop import job_stop
from ...jobs.models import Job
from ...jobs.selectors import job_visible_or_404
from ...machines.models import Machine
from ...projects.permissions import require_job_control
from ...templates.models import JobTemplate
from ...templates.selectors import template_latest_job, template_visible_or_404
from .dispatch import gathering_drop, gathering_rows, gathering_status
from .models import NamedJob, RankDispatch
from .payloads import job_status, seed_config_of
from .plans import is_torchyard_id, plan_id, plan_number
from .serializers import PLANNED

MAX_ID = 100  # a per-rank dispatch's job_id is at most this long (RankDispatch.key)


@dataclass
class Found:
    """What a job_id names: a job, the kept ranks of a per-rank dispatch, or a plan never queued."""

    seed_job_id: str | None
    job: Job | None = None
    rows: list[RankDispatch] = field(default_factory=list)
    task: JobTemplate | None = None


def _newest(rows: list[RankDispatch], job: Job | None) -> bool:
    """Whether kept ranks (still coming in) are newer than the job: a plan dispatched rank by rank again."""
    return bool(rows) and (job is None or max(r.created_at for r in rows) > job.created_at)


def _torchyard_job(*, user: Any, job_id: str) -> Job:
    """The job of Torchyard's id `job_id` (digits), if this user may see it; else a 404 naming the id."""
    if len(job_id) <= 18:  # beyond a bigint no job has that id
        try:
            return job_visible_or_404(user=user, job_id=int(job_id))
        except NotFound:
            pass
    raise NotFound(f"no job {job_id}: there is no Torchyard job {job_id} that you may see.")


def job_find(*, user: Any, job_id: str) -> Found:
    """What `job_id` names for this user (the module's docstring); 404 with a sentence when nothing."""
    if len(job_id) > MAX_ID:
        raise serializers.ValidationError({"job_id": [f"is {len(job_id)} characters long; a job_id has at most {MAX_ID}."]})
    if is_torchyard_id(job_id):
        return Found(seed_job_id=None, job=_torchyard_job(user=user, job_id=job_id))
    rows = gathering_rows(user=user, key=job_id)
    kept = [r for r in rows if r.job_id is None]
    number = plan_number(job_id)
    if number is not None:
        try:
            task = template_visible_or_404(user=user, template_id=number)
        except NotFound:
            raise NotFound(f"no plan {job_id}: there is no task {number} that you may see.") from None
        latest = template_latest_job(template=task)
        if _newest(kept, latest):
            return Found(seed_job_id=job_id, rows=kept)
        if latest is not None:
            return Found(seed_job_id=job_id, job=job_visible_or_404(user=user, job_id=latest.pk))
        return Found(seed_job_id=job_id, task=task)
    named = NamedJob.objects.filter(owner=user, key=job_id).select_related("job").first()
    # The newest of what the name was given to: a whole job, a per-rank dispatch's job, its ranks coming in.
    jobs = [j for j in (named.job if named else None, rows[0].job if rows and rows[0].job_id else None) if j]
    newest = max(jobs, key=lambda j: j.created_at, default=None)
    if _newest(kept, newest):
        return Found(seed_job_id=job_id, rows=kept)
    if newest is not None:
        return Found(seed_job_id=job_id, job=job_visible_or_404(user=user, job_id=newest.pk))
    raise NotFound(f"no job {job_id!r}: neither a Torchyard job id (digits), a plan's job_id (plan-12) "
                   "nor the job_id you gave a job of yours.")


def planned_status(task: JobTemplate) -> dict[str, Any]:
    """A plan never queued, as a DistributedJobStatus: status `planned`, no job, no node yet."""
    requirements = seed_config_of(task.spec)["resource_requirements"]
    machines, procs = requirements["num_machines"], requirements["procs_per_machine"]
    name = plan_id(task)
    return {
        "job_id": None, "seed_job_id": name, "status": PLANNED,
        "status_reason": (f"planned, not queued: queue it with POST /api/tasks/{task.pk}/queue_distributed or "
                          f"POST /api/network/distributed/dispatch {{\"job_id\": \"{name}\"}}"),
        "world_size": machines * procs if machines and procs else None, "attempt": 0,
        "master_addr": "", "master_port": None, "nodes": [], "waiting_for_ranks": [],
    }


def found_label(found: Found) -> str:
    """How answers name the job found: its Torchyard id, and the TransformerLab id it was found by if any."""
    assert found.job is not None
    return str(found.job.pk) if found.seed_job_id is None else f"{found.job.pk} ({found.seed_job_id})"


def found_on_machine(found: Found, *, job_id: str, machine: Machine) -> None:
    """404 with a sentence unless what `job_id` names is on `machine`: a job with a node there (any
    attempt) or pinned to it, or ranks coming in one of which targets it. A plan never queued is on
    no machine yet."""
    if found.job is not None:
        pinned = (found.job.spec.get("placement") or {}).get("machines") or []
        if any(n.machine_id == machine.pk for n in found.job.nodes.all()) or {machine.name, str(machine.pk)} & set(pinned):
            return
        raise NotFound(f"job {found_label(found)} has no node on machine {machine.name}.")
    if found.rows:
        if any(r.machine_id == machine.pk for r in found.rows):
            return
        raise NotFound(f"no rank of {job_id!r} targets machine {machine.name}: its ranks coming in target "
                       f"{', '.join(sorted({r.machine.name for r in found.rows}))}.")
    raise NotFound(f"{job_id} was never queued: it has no node on machine {machine.name} "
                   f"(GET /api/network/distributed/status/{job_id} answers the plan).")


def _nodes_on(answer: dict[str, Any], machine: Machine | None) -> dict[str, Any]:
    """A DistributedJobStatus with only the nodes on `machine` when given (as job_status's machine_id)."""
    if machine is None:
        return answer
    return {**answer, "nodes": [n for n in answer["nodes"] if n["machine_id"] == machine.pk]}


def job_find_status(*, user: Any, job_id: str, machine: Machine | None = None) -> dict[str, Any]:
    """The status of what `job_id` names; with `machine`, only its nodes there, and a 404 unless it is
    on that machine (found_on_machine)."""
    found = job_find(user=user, job_id=job_id)
    if machine is not None:
        found_on_machine(found, job_id=job_id, machine=machine)
    if found.job is not None:
        return job_status(found.job, machine_id=machine.pk if machine else None, seed_job_id=found.seed_job_id)
    if found.rows:
        return _nodes_on(gathering_status(job_id, found.rows), machine)
    assert found.task is not None
    return planned_status(found.task)


def job_find_job(*, user: Any, job_id: str) -> Found:
    """What `job_id` names, for a route that needs a job (its output, its files): a 404 saying why
    while there is none yet (its ranks still coming in, a plan never queued)."""
    found = job_find(user=user, job_id=job_id)
    if found.job is not None:
        return found
    if found.rows:
        raise NotFound(f"no job {job_id!r} yet: {gathering_status(job_id, found.rows)['status_reason']} (the job "
                       "is submitted once every rank has come).")
    assert found.task is not None
    raise NotFound(f"no job of {job_id} yet: it is {planned_status(found.task)['status_reason']}.")


def job_find_stop(*, user: Any, job_id: str, machine: Machine | None = None) -> dict[str, Any]:
    """Stop what `job_id` names: a job, all its nodes; the kept ranks of a per-rank dispatch,
    dropped so that no later rank starts the job; a plan never queued, nothing (there is nothing
    running, and the plan stays: it is a task, which DELETE /api/tasks/{id} removes). With
    `machine`: a 404 unless what it names is on that machine, and the answer's nodes those there
    (the whole job stops all the same: one node alone cannot, the job would recover it)."""
    found = job_find(user=user, job_id=job_id)
    if machine is not None:
        found_on_machine(found, job_id=job_id, machine=machine)
    if found.rows:
        dropped, job = gathering_drop(user=user, key=job_id)
        if job is None and not dropped:
            raise NotFound(f"no job {job_id!r}: its ranks were dropped already.")
        if job is None:
            return _nodes_on({**gathering_status(job_id, dropped), "status": "stopped", "waiting_for_ranks": [],
                              "status_reason": (f"stopped before every rank came: rank(s) "
                                                f"{', '.join(str(r.rank) for r in dropped)} dropped, nothing was launched")},
                             machine)
        found = Found(seed_job_id=job_id, job=job_visible_or_404(user=user, job_id=job.pk))
    if found.job is not None:
        require_job_control(user, found.job)
        job_stop(job_id=found.job.pk, reason=f"stopped by {user.get_username()}")
        return job_status(job_visible_or_404(user=user, job_id=found.job.pk), machine_id=machine.pk if machine else None,
                          seed_job_id=found.seed_job_id)
    assert found.task is not None
    require_job_control(user, found.task)
    return {**planned_status(found.task), "status_reason": (
        f"nothing to stop: {plan_id(found.task)} was never queued. The plan stays, as task {found.task.pk} "
        f"(DELETE /api/tasks/{found.task.pk} removes it).")}

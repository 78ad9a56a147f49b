"""TransformerLab's per-rank dispatch: its browser sent one request per rank ("rank 1 of dist_job_123
to 192.168.1.101"). Torchyard launches a job as a whole, so the ranks are kept as they come in, and
the job is submitted once every rank has its machine: each node on the machine its rank named, in
rank order (rank 0's machine is the master), through the same submission as every other job.

Torchyard picks the rendezvous itself: the master is node 0's machine, the one rank 0 targets, and
its port a free one there, chosen when the job is scheduled. A body's master_addr is accepted when
it names that machine (checked as soon as rank 0's machine is known, so the order the ranks come in
does not matter), its master_port only when it is the port already picked; any other value is
refused with the reason (outside the job-port range, another job's there, not picked yet), never
ignored.

A job_id names one job of its owner at a time (named.py): a per-rank dispatch under the id of a
whole job still live is refused, as a whole job under the id of ranks still coming in is."""

from __future__ import annotations

from typing import Any

from django.db import transaction
from django.db.models import Q
from rest_framework import serializers, status

from ...jobs.control.ports import master_port_refusal
from ...jobs.control.submit import job_submit
from ...jobs.models import Job
from ...jobs.selectors import job_visible_or_404
from ...jobs.spec.jobspec import JobSpec
from ...machines.models import Machine
from ...templates.services import template_job_record
from .models import RankDispatch
from .named import id_in_use, lock_user_dispatches
from .payloads import (
    WHOLE_JOB_REFUSED,
    DistributedTrainingConfig,
    ResourceRequirements,
    job_status,
    seed_config_of,
    spec_from_seed,
)
from .plans import own_id_refusal, plan_disagreements, plan_number, planned_task

# What a plan stands for in a per-rank dispatch body (world_size and the rank's machine are the body's).
RANK_FIELDS = ("plugin_name", "config", "args", "project")
RANK_REQUIREMENTS = ("gpus_per_machine", "min_gpu_memory", "procs_per_machine")

MASTER = ("Torchyard picks the master itself: node 0's machine (the one rank 0 targets) and a free port on it, "
          "which the job's status answers; leave master_addr and master_port out of the dispatch.")


class RankRequirements(ResourceRequirements):
    # The rank's world_size says it: a given one must agree (RankDispatchIn.validate), then it is dropped.
    num_machines = serializers.IntegerField(min_value=1, max_value=256, required=False,
                                            help_text="world_size says it: leave it out, or send the same")


class RankDispatchIn(DistributedTrainingConfig):
    """TransformerLab's dispatch body: one rank of a job to one machine. Every rank of one `job_id`
    sends the same world_size, plugin_name, config, args, resource_requirements and project. A
    plan's `job_id` (plan-12) stands for those fields: any of them the body gives too must say what
    the plan says."""

    plugin_name = serializers.CharField(max_length=200, required=False,
                                        help_text="absent: the plan whose job_id this is says which plugin and config")
    job_id = serializers.CharField(max_length=100, help_text=(
        "the caller's name for the job, shared by its ranks (dist_job_123), or a plan's job_id (plan-12); "
        "never digits, which are Torchyard's job ids"))
    target_machine = serializers.CharField(max_length=255, help_text="the machine's name, id or host")
    rank = serializers.IntegerField(min_value=0, help_text="the machine's rank, 0 to world_size - 1")
    world_size = serializers.IntegerField(min_value=1, max_value=256, help_text="TransformerLab's world size: machines")
    master_addr = serializers.CharField(max_length=255, required=False, help_text=(
        "Torchyard's master is rank 0's machine: accepted when it names that machine (its host or name), "
        "refused otherwise; best left out"))
    master_port = serializers.IntegerField(min_value=1, max_value=65535, required=False, help_text=(
        "Torchyard picks a free port when it schedules the job (the status answers it): accepted only when "
        "it is that port, refused otherwise; best left out"))
    resource_requirements = RankRequirements(default=dict)
    # Fields of the whole-job body that a rank's body has no use for: refused (SeedStrict), not dropped.
    machine_selection = None
    selected_machines = None
    refused = {**WHOLE_JOB_REFUSED, **{key: (
        "a per-rank dispatch places each rank on its target_machine: leave machine_selection and "
        "selected_machines out.") for key in ("machine_selection", "selected_machines")}, **{key: (
        "a per-rank dispatch places each rank on its target_machine (rank 0's is the master): leave "
        f"{key} out.") for key in ("placement", "policy", "placement_policy")}}

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        errors: dict[str, Any] = {}
        if attrs["rank"] >= attrs["world_size"]:
            errors["rank"] = [f"must be below world_size ({attrs['world_size']})."]
        requirements = dict(attrs.get("resource_requirements") or {})
        machines = requirements.pop("num_machines", None)
        if machines is not None and machines != attrs["world_size"]:
            errors["resource_requirements"] = {"num_machines": [
                f"world_size says {attrs['world_size']} machines: leave num_machines out, or send the same."]}
        if errors:
            raise serializers.ValidationError(errors)
        return {**attrs, "resource_requirements": requirements}


def is_rank_dispatch(body: Any) -> bool:
    return isinstance(body, dict) and ("rank" in body or "target_machine" in body)


def machine_called(key: str, *, field: str) -> Machine:
    """The machine with this name, id or host (the seed names machines by address)."""
    found = Machine.objects.filter(name=key).first() or (
        Machine.objects.filter(pk=int(key)).first() if key.isdigit() else None)
    if found is not None:
        return found
    by_host = list(Machine.objects.filter(host=key)[:2])
    if len(by_host) == 1:
        return by_host[0]
    if by_host:
        raise serializers.ValidationError({field: [f"several machines have host {key}; give the machine's name."]})
    raise serializers.ValidationError({field: [f"no machine has the name, id or host {key!r}."]})


def _seed_config(config: dict[str, Any], world_size: int, machines: list[str]) -> dict[str, Any]:
    """The whole job as a DistributedTrainingConfig: its ranks' shared fields, its machines by rank."""
    return {**config, "resource_requirements": {**config["resource_requirements"], "num_machines": world_size},
            "machine_selection": "manual" if machines else "auto", "selected_machines": machines}


def _procs(config: dict[str, Any]) -> int:
    return int(config["resource_requirements"].get("procs_per_machine") or 1)


def gathering_status(key: str, rows: list[RankDispatch]) -> dict[str, Any]:
    """A job whose ranks are still coming in, as the seed's DistributedJobStatus ("dispatching")."""
    first = rows[0]
    procs, by_rank = _procs(first.config), {r.rank: r for r in rows}
    waiting = [rank for rank in range(first.world_size) if rank not in by_rank]
    return {
        "job_id": None, "seed_job_id": key, "status": "dispatching",
        "status_reason": f"{len(rows)} of {first.world_size} ranks dispatched; waiting for rank(s) "
                         + ", ".join(str(r) for r in waiting),
        "world_size": first.world_size * procs, "attempt": 0,
        "master_addr": by_rank[0].machine.host if 0 in by_rank else "", "master_port": None,
        "nodes": [{"machine_id": r.machine_id, "machine_name": r.machine.name, "rank": r.rank,
                   "ranks": [r.rank * procs, r.rank * procs + procs - 1], "status": "pending",
                   "start_time": None, "end_time": None, "progress": None} for r in rows],
        "waiting_for_ranks": waiting,
    }


def _names(machine: Machine, text: str, *, by_id: bool = True) -> bool:
    return text in (machine.name, machine.host) or (by_id and text == str(machine.pk))


def _master_refusals(*, key: str, rank: int, machine: Machine, addr: str, port: int | None,
                     rows: list[RankDispatch], job: Job | None) -> dict[str, list[str]]:
    """A field error for a master_addr or master_port that is not what Torchyard picks (MASTER):
    this body's, or a master_addr another rank of the job named, once rank 0's machine is known."""
    errors: dict[str, list[str]] = {}
    others = [r for r in rows if r.rank != rank]
    master = machine if rank == 0 else next((r.machine for r in others if r.rank == 0), None)
    if port is not None and (job is None or job.master_port != port):
        errors["master_port"] = [f"{_port_refusal(port, master, job)}. {MASTER}"]
    if addr and master is not None and not _names(master, addr, by_id=False):
        errors["master_addr"] = [f"{addr} is not rank 0's machine {master.name} ({master.host}). {MASTER}"]
    elif addr and master is None and not Machine.objects.filter(Q(name=addr) | Q(host=addr)).exists():
        errors["master_addr"] = [f"no machine has the name or host {addr!r}. {MASTER}"]
    elif master is not None:
        wrong = [r for r in others if r.master_addr and not _names(master, r.master_addr, by_id=False)]
        if wrong:
            errors["master_addr"] = [
                f"rank(s) {', '.join(str(r.rank) for r in wrong)} of {key} named master_addr {wrong[0].master_addr}, "
                f"which is not rank 0's machine {master.name} ({master.host}): send rank 0 to that machine, or "
                f"send those ranks again without master_addr. {MASTER}"]
    return errors


def _port_refusal(port: int, master: Machine | None, job: Job | None) -> str:
    """Why a rank's master_port is not its job's, the first reason that holds: not the port already
    picked; outside the job-port range; another live job's on rank 0's machine; not picked yet."""
    if job is not None and job.master_port:
        return f"this job's master port is {job.master_port}, not {port}"
    why = (master_port_refusal(port, host=master.host, machine_name=master.name) if master is not None
           else master_port_refusal(port))
    if why is not None:
        return why
    return f"Torchyard has not picked this job's master port yet (it does when it schedules the job), so {port} cannot be it"


def _from_plan(*, user: Any, key: str, body: dict[str, Any], given: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The plan a per-rank dispatch names (None for a job the body describes itself), and the body
    with the plan's fields in. A field the body gives too must say what the plan says; so must
    world_size (the plan's machines) and, when the plan placed its nodes by hand, the rank's machine."""
    if plan_number(key) is None and "plugin_name" in body:
        return None, body
    task = planned_task(user=user, job_id=key, otherwise=(
        "Name your own job with letters (dist_job_123) and give plugin_name and the job's other fields."))
    planned = seed_config_of(task.spec)
    errors: dict[str, Any] = plan_disagreements(task, given)
    machines = planned["resource_requirements"]["num_machines"]
    if machines is not None and machines != body["world_size"]:
        errors["world_size"] = [f"{key} plans {machines} machine(s), not {body['world_size']}: send world_size "
                                f"{machines}, or plan again to change it."]
    placed = planned["selected_machines"]
    if placed and body["rank"] < len(placed):
        machine = machine_called(body["target_machine"], field="target_machine")
        if not _names(machine, placed[body["rank"]]):
            errors["target_machine"] = [f"{key} places rank {body['rank']} on {placed[body['rank']]}, not "
                                        f"{body['target_machine']}: send it there, or plan again to change it."]
    if errors:
        raise serializers.ValidationError(errors)
    return task, {**body, **{k: planned[k] for k in RANK_FIELDS},
                  "resource_requirements": {k: planned["resource_requirements"][k] for k in RANK_REQUIREMENTS}}


def dispatch_rank(*, request, body: dict[str, Any], given: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Keep one rank; submit the job when it was the last. `given` is the job's fields the body
    itself gave (plans.given_fields). Returns the status and the HTTP status: 202 while ranks are
    missing, 201 when this rank completed the job, 200 when the job was submitted already and this
    rank says again what it said."""
    user, key, rank, world_size = request.user, body["job_id"], body["rank"], body["world_size"]
    if plan_number(key) is None and (refusal := own_id_refusal(key)):
        raise serializers.ValidationError({"job_id": [refusal]})
    task, body = _from_plan(user=user, key=key, body=body, given=given)
    machine = machine_called(body["target_machine"], field="target_machine")
    addr, port = body.get("master_addr") or "", body.get("master_port")
    # Absent, or given with its defaults: the same requirements (the ranks' bodies are compared).
    defaults = RankRequirements(data={})
    defaults.is_valid(raise_exception=True)
    requirements = {**defaults.validated_data, **(body["resource_requirements"] or {})}
    config = {"plugin_name": body["plugin_name"], "config": body["config"], "args": body["args"],
              "project": body["project"], "resource_requirements": requirements}
    # The job as it will be submitted, checked now (plugin, project, hyperparameters), not at its last rank.
    spec_from_seed(_seed_config(config, world_size, []), request)
    with transaction.atomic():
        # One dispatch of this user at a time: two ranks arriving together must not both miss the other.
        lock_user_dispatches(user)
        rows = gathering_rows(user=user, key=key)
        if not rows and (refusal := id_in_use(user=user, key=key, rows=rows)):
            raise serializers.ValidationError({"job_id": [refusal]})  # a whole job of this id is live
        submitted = next((r.job_id for r in rows if r.job_id), None)
        if submitted is not None:
            same = any(r.rank == rank and r.machine_id == machine.pk for r in rows)
            if not same:
                raise serializers.ValidationError({"job_id": [
                    f"{key} was dispatched already (job {submitted}), rank {rank} elsewhere; name a new job with another job_id."]})
            job = job_visible_or_404(user=user, job_id=submitted)
            if errors := _master_refusals(key=key, rank=rank, machine=machine, addr=addr, port=port, rows=rows, job=job):
                raise serializers.ValidationError(errors)
            return job_status(job, seed_job_id=key), status.HTTP_200_OK
        other = next((r for r in rows if r.rank != rank), None)
        if other is not None and (other.world_size, other.config) != (world_size, config):
            raise serializers.ValidationError({"job_id": [
                f"rank {other.rank} of {key} came with another world_size, plugin_name, config, args, "
                "resource_requirements or project: every rank of one job sends the same."]})
        if errors := _master_refusals(key=key, rank=rank, machine=machine, addr=addr, port=port, rows=rows, job=None):
            raise serializers.ValidationError(errors)
        RankDispatch.objects.update_or_create(owner=user, key=key, rank=rank, defaults={
            "world_size": world_size, "machine": machine, "config": config, "master_addr": addr})
        rows = gathering_rows(user=user, key=key)
        if len(rows) < world_size:
            return gathering_status(key, rows), status.HTTP_202_ACCEPTED
        # Every rank is in: the job, each node on its rank's machine. Refused (PlanError) when those
        # machines cannot hold it: this rank is not kept, the others are, so sending it again retries.
        machines = [r.machine.name for r in rows]
        spec = spec_from_seed(_seed_config(config, world_size, machines), request, name=key)
        job = job_submit(spec=JobSpec.from_json(spec), owner=user)
        RankDispatch.objects.filter(owner=user, key=key).update(job=job)
        if task is not None:
            template_job_record(template=task, job=job)
    return job_status(job_visible_or_404(user=user, job_id=job.pk), seed_job_id=key), status.HTTP_201_CREATED


def gathering_rows(*, user: Any, key: str) -> list[RankDispatch]:
    """This user's kept ranks of `key`, rank order; the job, when it was submitted, is in each row."""
    return list(RankDispatch.objects.filter(owner=user, key=key).select_related("machine", "job").order_by("rank"))


def gathering_drop(*, user: Any, key: str) -> tuple[list[RankDispatch], Job | None]:
    """Forget this user's kept ranks of `key` whose job was never submitted (a stop before every rank
    came). Returns the ranks dropped, or none and the job when the last rank won the race."""
    with transaction.atomic():
        # The lock dispatch_rank takes: a rank arriving now waits, and finds nothing kept.
        lock_user_dispatches(user)
        rows = gathering_rows(user=user, key=key)
        if rows and rows[0].job_id is not None:
            return [], rows[0].job
        RankDispatch.objects.filter(owner=user, key=key, job=None).delete()
    return rows, None

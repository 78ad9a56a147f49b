"""Seed 000's per-rank dispatch: its browser sent one request per rank ("rank 1 of dist_job_123 to
192.168.1.101"). Torchyard launches a job as a whole, so the ranks are kept as they come in, and
the job is submitted once every rank has its machine: each node on the machine its rank named, in
rank order (rank 0's machine is the master), through the same submission as every other job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound

from ..jobs.jobspec import JobSpec
from ..jobs.selectors import job_visible_or_404
from ..jobs.services import job_submit
from ..machines.models import Machine
from .models import RankDispatch
from .plans import planned_rank_fields
from .seed import DistributedTrainingConfig, ResourceRequirements, job_status, spec_from_seed

# Ranks of a job whose other ranks never came are forgotten after this long.
RANK_DISPATCH_WINDOW = timedelta(minutes=10)


class RankRequirements(ResourceRequirements):
    num_machines = None  # the rank's world_size says it


class RankDispatchIn(DistributedTrainingConfig):
    """The seed's dispatch body: one rank of a job to one machine. Every rank of one `job_id` sends
    the same world_size, plugin_name, config, args, resource_requirements and project; without
    plugin_name, `job_id` is a plan's (distributed/plan), which stands for those fields."""

    plugin_name = serializers.CharField(max_length=200, required=False,
                                        help_text="absent: the plan whose job_id this is says which plugin and config")
    job_id = serializers.CharField(max_length=100, help_text="the caller's name for the job, shared by its ranks")
    target_machine = serializers.CharField(max_length=255, help_text="the machine's name, id or host")
    rank = serializers.IntegerField(min_value=0, help_text="the machine's rank, 0 to world_size - 1")
    world_size = serializers.IntegerField(min_value=1, max_value=256, help_text="the seed's world size: machines")
    master_addr = serializers.CharField(max_length=255, required=False, help_text=(
        "ignored: the master is rank 0's machine, with a port Torchyard picks; the status says which"))
    master_port = serializers.IntegerField(min_value=1, max_value=65535, required=False, help_text="ignored, as master_addr")
    resource_requirements = RankRequirements(default=dict)
    machine_selection = None
    selected_machines = None

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        if attrs["rank"] >= attrs["world_size"]:
            raise serializers.ValidationError({"rank": [f"must be below world_size ({attrs['world_size']})."]})
        return attrs


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


def _gathering(key: str, rows: list[RankDispatch]) -> dict[str, Any]:
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


def dispatch_rank(*, request, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
    """Keep one rank; submit the job when it was the last. Returns the seed's status and the HTTP
    status: 202 while ranks are missing, 201 when this rank completed the job, 200 when the job
    was submitted already and this rank says again what it said."""
    user, key, rank, world_size = request.user, body["job_id"], body["rank"], body["world_size"]
    if "plugin_name" not in body:
        body = {**body, **planned_rank_fields(user=user, job_id=key)}
    machine = machine_called(body["target_machine"], field="target_machine")
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
        get_user_model().objects.select_for_update().filter(pk=user.pk).first()
        RankDispatch.objects.filter(owner=user, job=None, created_at__lt=timezone.now() - RANK_DISPATCH_WINDOW).delete()
        rows = list(RankDispatch.objects.filter(owner=user, key=key).select_related("machine"))
        submitted = next((r.job_id for r in rows if r.job_id), None)
        if submitted is not None:
            same = any(r.rank == rank and r.machine_id == machine.pk for r in rows)
            if not same:
                raise serializers.ValidationError({"job_id": [
                    f"{key} was dispatched already (job {submitted}), rank {rank} elsewhere; name a new job with another job_id."]})
            return job_status(job_visible_or_404(user=user, job_id=submitted), seed_job_id=key), status.HTTP_200_OK
        other = next((r for r in rows if r.rank != rank), None)
        if other is not None and (other.world_size, other.config) != (world_size, config):
            raise serializers.ValidationError({"job_id": [
                f"rank {other.rank} of {key} came with another world_size, plugin_name, config, args, "
                "resource_requirements or project: every rank of one job sends the same."]})
        RankDispatch.objects.update_or_create(owner=user, key=key, rank=rank,
                                              defaults={"world_size": world_size, "machine": machine, "config": config})
        rows = list(RankDispatch.objects.filter(owner=user, key=key).select_related("machine").order_by("rank"))
        if len(rows) < world_size:
            return _gathering(key, rows), status.HTTP_202_ACCEPTED
        # Every rank is in: the job, each node on its rank's machine. Refused (PlanError) when those
        # machines cannot hold it: this rank is not kept, the others are, so sending it again retries.
        machines = [r.machine.name for r in rows]
        spec = spec_from_seed(_seed_config(config, world_size, machines), request, name=key)
        job = job_submit(spec=JobSpec.from_json(spec), owner=user)
        RankDispatch.objects.filter(owner=user, key=key).update(job=job)
    return job_status(job_visible_or_404(user=user, job_id=job.pk), seed_job_id=key), status.HTTP_201_CREATED


def seed_job_status(*, user: Any, job_id: str) -> dict[str, Any]:
    """The status of a job by the id a per-rank dispatch gave it, or by Torchyard's id."""
    rows = list(RankDispatch.objects.filter(owner=user, key=job_id).select_related("machine").order_by("rank"))
    if rows and rows[0].job_id is not None:
        return job_status(job_visible_or_404(user=user, job_id=rows[0].job_id), seed_job_id=job_id)
    if rows:
        return _gathering(job_id, rows)
    if not job_id.isdigit():
        raise NotFound(f"no job {job_id!r}: neither a job id nor the job_id of a dispatch of yours.")
    return job_status(job_visible_or_404(user=user, job_id=int(job_id)))

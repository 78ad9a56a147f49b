"""TransformerLab's `/api/network/*` routes (seed 000), kept as thin aliases over the same
services as the canonical API, with the seed's payloads.

The seed planned and dispatched one rank at a time from the browser; here `distributed/plan` is
the dry run and `distributed/dispatch` submits the whole job, which Torchyard then places,
launches and supervises itself."""

from __future__ import annotations

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiTypes, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView
from torchyard import protocol

from ..artifacts.api import artifact_response
from ..artifacts.serializers import ArtifactOut
from ..bundles.services import bundle_for_user, bundles_url
from ..celery import app as celery_app
from ..jobs.agent_api import bundle_grant
from ..jobs.models import Job
from ..jobs.planner import order_machines
from ..jobs.selectors import job_visible_or_404, machine_candidates
from ..jobs.services import job_preview_plan, job_stop, job_submit
from ..jobs.spec import JobSpecSerializer, RuntimeSerializer, builtin_recipes
from ..machines.api import MachineDetailView, force_requested
from ..machines.models import Machine
from ..machines.selectors import machine_list
from ..machines.serializers import MachineOut
from ..machines.services import machine_delete
from ..projects.permissions import CanSubmitSomewhere, IsStaff, require_job_control
from ..renderers import DOWNLOAD_RENDERERS


class ResourceRequirements(serializers.Serializer):
    num_machines = serializers.IntegerField(min_value=1, max_value=256, default=1)
    gpus_per_machine = serializers.IntegerField(min_value=0, max_value=64, default=0)
    min_gpu_memory = serializers.IntegerField(min_value=0, default=0)
    procs_per_machine = serializers.IntegerField(min_value=1, max_value=64, default=1)


class DistributedTrainingConfig(serializers.Serializer):
    """The seed's DistributedTrainingConfig; `plugin_name` is a recipe (`mlp_ddp` or its path)."""

    plugin_name = serializers.CharField(max_length=200)
    config = serializers.DictField(default=dict)
    resource_requirements = ResourceRequirements(default=dict)
    machine_selection = serializers.ChoiceField(choices=["auto", "manual"], default="auto")
    selected_machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list)
    args = serializers.ListField(child=serializers.CharField(max_length=4096), default=list)
    project = serializers.CharField(max_length=63, default="default", help_text="Torchyard's: the job's project")

    def validate(self, attrs):
        if attrs["machine_selection"] == "manual" and not attrs["selected_machines"]:
            raise serializers.ValidationError({"selected_machines": ["manual selection needs machines."]})
        return attrs


def _default_requirements() -> dict:
    defaults = ResourceRequirements(data={})
    defaults.is_valid(raise_exception=True)
    return dict(defaults.validated_data)


def _spec_from_seed(data: dict, request) -> dict:
    """Translate the seed's request into a JobSpec and validate it like any other."""
    plugin = data["plugin_name"]
    entrypoint = plugin if plugin.endswith(".py") else f"examples/{plugin}.py"
    # A nested serializer's default ({}) is not validated: its own defaults fill an absent section.
    req = data["resource_requirements"] or _default_requirements()
    spec = {
        "name": plugin.rsplit("/", 1)[-1].removesuffix(".py"),
        "project": data["project"],
        "entrypoint": entrypoint,
        "args": data["args"],
        "hyperparameters": data["config"],
        "resources": {"nodes": req["num_machines"], "procs_per_node": req["procs_per_machine"],
                      "gpus_per_node": req["gpus_per_machine"], "min_gpu_memory": req["min_gpu_memory"]},
        "placement": {"policy": "spread", "machines": data["selected_machines"] if data["machine_selection"] == "manual" else []},
    }
    if entrypoint not in builtin_recipes():
        raise serializers.ValidationError({"plugin_name": [f"unknown plugin {plugin!r}; built-in: {', '.join(builtin_recipes())}."]})
    validated = JobSpecSerializer(data=spec, context={"request": request})
    validated.is_valid(raise_exception=True)
    return validated.validated_data


def _seed_body(request) -> dict:
    body = DistributedTrainingConfig(data=request.data)
    body.is_valid(raise_exception=True)
    return _spec_from_seed(body.validated_data, request)


def _status(job: Job) -> dict:
    """The seed's DistributedJobStatus."""
    nodes = [n for n in job.nodes.all() if n.attempt == job.attempt]
    total = (job.progress or {}).get("total_steps")
    return {
        "job_id": job.pk,
        "status": job.status,
        "status_reason": job.status_reason,
        "world_size": job.world_size,
        "attempt": job.attempt,
        "master_addr": job.master_addr,
        "master_port": job.master_port,
        "nodes": [
            {
                "machine_id": n.machine_id,
                "machine_name": n.machine_name,
                "rank": n.node_rank,
                "ranks": [n.rank_start, n.rank_end],
                "status": n.status,
                "start_time": n.started_at,
                "end_time": n.finished_at,
                "progress": (100.0 * (n.progress or {}).get("step", 0) / total) if total and n.progress else None,
            }
            for n in nodes
        ],
    }


class NetworkMachineView(MachineDetailView):
    """The canonical machine view; the seed's DELETE answers with a message instead of a 204."""

    def delete(self, request, machine_id: int):
        machine_delete(machine=get_object_or_404(Machine, pk=machine_id), force=force_requested(request))
        return Response({"message": "machine removed"})


class NetworkMachineByNameView(APIView):
    permission_classes = [IsStaff]

    def delete(self, request, name: str):
        machine_delete(machine=get_object_or_404(Machine, name=name), force=force_requested(request))
        return Response({"message": f"machine {name} removed"})


class NetworkStatusView(APIView):
    def get(self, request):
        machines = list(machine_list())
        counts = {s: sum(1 for m in machines if m.status == s) for s in Machine.Status.values}
        return Response({
            "total_machines": len(machines),
            **counts,
            "total_cpus": sum(int(m.capabilities.get("cpu_count") or 0) for m in machines if m.is_schedulable),
            "total_gpus": sum(int(m.capabilities.get("gpu_count") or 0) for m in machines if m.is_schedulable),
            "machines": MachineOut(machines, many=True).data,
        })


def _ping(machines: list[Machine], timeout: float = 1.5) -> dict[int, bool]:
    """Ask the agents' Celery workers themselves (remote control over the broker), not the database."""
    replies = celery_app.control.ping(timeout=timeout) or []
    answered = set()
    for reply in replies:
        for worker in reply:
            name = worker.split("@", 1)[0]
            if name.startswith("agent-") and name[6:].isdigit():
                answered.add(int(name[6:]))
    return {m.pk: m.pk in answered for m in machines}


class NetworkPingView(APIView):
    def post(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        alive = _ping([machine])[machine.pk]
        return Response({"machine_id": machine.pk, "name": machine.name, "reachable": alive,
                         "status": machine.status, "last_heartbeat": machine.last_heartbeat})


class NetworkHealthCheckView(APIView):
    def post(self, request):
        machines = list(machine_list())
        alive = _ping(machines)
        return Response({"results": [{"machine_id": m.pk, "name": m.name, "reachable": alive[m.pk],
                                      "status": m.status} for m in machines],
                         "healthy": sum(alive.values()), "total": len(machines)})


class NetworkCapabilitiesView(APIView):
    """Capabilities of the machine the server runs on (the seed's "this machine")."""

    def get(self, request):
        from torchyard.agent.capabilities import capabilities, load

        # Free disk where Torchyard keeps its data (the nearest folder that exists yet).
        where = next(p for p in (settings.DATA_DIR, *settings.DATA_DIR.parents) if p.exists())
        return Response({"capabilities": capabilities(str(where)), "current_load": load()})


class DistributedPlanView(APIView):
    def post(self, request):
        spec = _seed_body(request)
        return Response({"job_id": None, "execution_plan": job_preview_plan(spec=spec), "spec": spec})


class DistributedDispatchView(APIView):
    def post(self, request):
        job = job_submit(spec=_seed_body(request), owner=request.user)
        return Response(_status(Job.objects.get(pk=job.pk)), status=status.HTTP_201_CREATED)


class DistributedStatusView(APIView):
    def get(self, request, job_id: int):
        return Response(_status(job_visible_or_404(user=request.user, job_id=job_id)))


class DistributedStopView(APIView):
    def post(self, request, job_id: int):
        require_job_control(request.user, job_visible_or_404(user=request.user, job_id=job_id))
        job_stop(job_id=job_id, reason=f"stopped by {request.user.username}")
        return Response(_status(Job.objects.get(pk=job_id)))


class SuggestMachinesView(APIView):
    """Online machines in the order the planner would use them (least loaded first)."""

    def get(self, request):
        try:
            wanted = int(request.query_params.get("num_machines", "1"))
            gpus = int(request.query_params.get("gpus_per_machine", "0"))
        except ValueError:
            raise serializers.ValidationError({"num_machines": ["must be integers."]}) from None
        ranked = [c for c in order_machines(machine_candidates(), "spread")
                  if c.schedulable and len(c.free_gpus(0)) >= gpus]
        by_id = {m.pk: m for m in machine_list()}
        return Response({
            "suggested": [c.id for c in ranked[:wanted]],
            "enough": len(ranked) >= wanted,
            "machines": MachineOut([by_id[c.id] for c in ranked], many=True).data,
        })


class DispatchToMachineView(APIView):
    """The whole job on one machine (the seed's remote job dispatch): a JobSpec, pinned there."""

    def post(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        body = dict(request.data) if isinstance(request.data, dict) else {}
        resources = dict(body.get("resources") or {})
        resources["nodes"] = 1
        body["resources"] = resources
        body["placement"] = {"policy": "pack", "machines": [machine.name]}
        validated = JobSpecSerializer(data=body, context={"request": request})
        validated.is_valid(raise_exception=True)
        job = job_submit(spec=validated.validated_data, owner=request.user)
        return Response(_status(Job.objects.get(pk=job.pk)), status=status.HTTP_201_CREATED)


class PrepareDependenciesIn(serializers.Serializer):
    bundle = serializers.RegexField(r"^[0-9a-f]{64}$", required=False,
                                    help_text="a bundle you uploaded: fetched and unpacked, its requirements.txt installed")
    pip = serializers.ListField(child=serializers.CharField(max_length=500), default=list, max_length=200)
    machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list,
                                     help_text="names or ids; default: every online machine")

    def validate_pip(self, value: list[str]) -> list[str]:
        return RuntimeSerializer().validate_pip(value)


class PrepareDependenciesView(APIView):
    """Seed 000's "prepare dependencies": warm the chosen machines' caches (the bundle, the
    environment of its requirements and `pip`) before a job needs them. Asynchronous: each
    machine's heartbeat lists what its cache holds (`capabilities.cache`)."""

    permission_classes = [CanSubmitSomewhere]

    def post(self, request):
        body = PrepareDependenciesIn(data=request.data)
        body.is_valid(raise_exception=True)
        data = body.validated_data
        code: dict = {}
        if data.get("bundle"):
            bundle = bundle_for_user(sha256=data["bundle"], user=request.user)
            if bundle is None:
                raise serializers.ValidationError({"bundle": ["no such bundle for this user."]})
            code = {"bundle": bundle.sha256, "size": bundle.size, "uri": f"{bundles_url()}/{bundle.storage_name}"}
        elif not data["pip"]:
            raise serializers.ValidationError({"bundle": ["give a bundle, pip requirements, or both."]})
        online = [m for m in machine_list() if m.is_schedulable]  # online or busy
        wanted = set(data["machines"])
        chosen = [m for m in online if not wanted or m.name in wanted or str(m.pk) in wanted]
        unknown = wanted - {m.name for m in chosen} - {str(m.pk) for m in chosen}
        if unknown:
            raise serializers.ValidationError({"machines": [f"not online: {', '.join(sorted(unknown))}."]})
        for machine in chosen:
            granted = {**code, "grant": bundle_grant(sha256=code["bundle"], machine_id=machine.pk)} if code else {}
            celery_app.send_task(protocol.TASK_WARM_CACHES, kwargs={"code": granted, "pip": data["pip"]},
                                 queue=protocol.machine_queue(machine.pk))
        return Response({"machines": [{"machine_id": m.pk, "name": m.name, "status": "preparing"} for m in chosen]},
                        status=status.HTTP_202_ACCEPTED)


# --- a job's output files (its artifacts) ---------------------------------------------------------
class LocalJobFileView(APIView):
    """`/api/network/local_job_file/{job_id}/{key}`: the output file at path `key` (the newest
    attempt's, the lowest node rank's when several nodes wrote it)."""

    renderer_classes = DOWNLOAD_RENDERERS

    @extend_schema(responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, job_id: int, key: str):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        artifact = job.artifacts.filter(path=key).order_by("-attempt", "node_rank").first()
        if artifact is None:
            raise NotFound(f"job {job_id} has no output file {key!r}.")
        return artifact_response(artifact)


class LocalJobOutputView(APIView):
    """`/api/network/local_job_output/{job_id}`: the job's status, its output files and its last log lines."""

    def get(self, request, job_id: int):
        job = job_visible_or_404(user=request.user, job_id=job_id)
        lines = job.events.filter(type="log").order_by("-id")[:100]
        return Response({
            "job_id": job.pk,
            "status": job.status,
            "files": ArtifactOut(job.artifacts.all(), many=True).data,
            "output": [f"[rank {e.rank}] {e.payload.get('line', '')}" for e in reversed(list(lines))],
        })

"""TransformerLab's `/api/network/*` routes, kept as thin aliases over the same
services as the canonical API, with TransformerLab's payloads.

TransformerLab planned and dispatched one rank at a time from the browser; here `distributed/plan` is
the dry run and `distributed/dispatch` submits the whole job, which Torchyard then places,
launches and supervises itself. Its per-rank dispatch body is taken too (dispatch.py): the
ranks are kept until every one has its machine, then the job is submitted on those machines."""

from __future__ import annotations

import time

from django.conf import settings
from django.shortcuts import get_object_or_404
from drf_spectacular.utils import OpenApiParameter, OpenApiTypes, PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.exceptions import NotFound
from rest_framework.response import Response
from rest_framework.views import APIView
from torchyard import protocol

from ...artifacts.api import artifact_response
from ...artifacts.serializers import ArtifactOut
from ...bundles.services import bundle_for_user, bundles_url
from ...celery import app as celery_app
from ...jobs.control.admission import admit_spec
from ...jobs.control.dispatch import job_preview_plan
from ...jobs.control.grants import bundle_grant
from ...jobs.control.submit import job_submit
from ...jobs.intake.sections import RuntimeSerializer
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.models import Job
from ...jobs.placement.candidates import Need, machine_candidates
from ...jobs.placement.planner import order_machines
from ...jobs.spec.jobspec import JobSpec
from ...machines.api import MachineDetailView, force_requested
from ...machines.models import Machine
from ...machines.selectors import machine_list
from ...machines.serializers import MachineOut
from ...machines.services import machine_delete
from ...projects.permissions import CanSubmitSomewhere, IsStaff
from ...rest.openapi import ErrorOut
from ...rest.renderers import DOWNLOAD_RENDERERS
from ...rest.strict import StrictFields
from ...templates.services import on_one_machine
from .dispatch import RankDispatchIn, dispatch_rank, is_rank_dispatch, machine_called
from .ids import found_label, job_find_job, job_find_status, job_find_stop
from .named import NamedDispatchIn, is_named_dispatch, named_job_submit
from .payloads import DistributedTrainingConfig, job_status, seed_body
from .plans import (
    PlannedDispatchIn,
    given_fields,
    is_planned_dispatch,
    plan_id,
    plan_keep,
    planned_job_submit,
)
from .serializers import (
    CapabilitiesOut,
    DistributedJobStatusOut,
    DistributedPlanOut,
    ExecuteJobIn,
    HealthCheckOut,
    LocalJobOutputOut,
    MessageOut,
    NetworkStatusOut,
    PingOut,
    PrepareDependenciesOut,
    SuggestMachinesIn,
    SuggestMachinesOut,
)

FORCE = OpenApiParameter("force", bool, description="stop its live nodes first")


def _status(job: Job, *, machine_id: int | None = None, seed_job_id: str | None = None) -> dict:
    return DistributedJobStatusOut(job_status(job, machine_id=machine_id, seed_job_id=seed_job_id)).data


class NetworkMachineView(MachineDetailView):
    """The canonical machine view; TransformerLab's DELETE answers with a message instead of a 204."""

    @extend_schema(parameters=[FORCE], responses={200: MessageOut, 409: ErrorOut})
    def delete(self, request, machine_id: int):
        machine_delete(machine=get_object_or_404(Machine, pk=machine_id), force=force_requested(request))
        return Response({"message": "machine removed"})


class NetworkMachineByNameView(APIView):
    permission_classes = [IsStaff]

    @extend_schema(parameters=[FORCE], responses={200: MessageOut, 409: ErrorOut})
    def delete(self, request, name: str):
        machine_delete(machine=get_object_or_404(Machine, name=name), force=force_requested(request))
        return Response({"message": f"machine {name} removed"})


class NetworkStatusView(APIView):
    @extend_schema(responses=NetworkStatusOut)
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


def _agent_of(worker: str) -> int | None:
    """The machine id of an agent's Celery worker name (`agent-<id>@<hostname>`)."""
    name = worker.split("@", 1)[0]
    return int(name[6:]) if name.startswith("agent-") and name[6:].isdigit() else None


def ping_agents(machine_ids: list[int], timeout: float) -> dict[int, float | None]:
    """Each machine's round trip in ms to its agent and back, None without an answer in `timeout`
    seconds. A Celery remote-control ping over the broker, addressed to those agents only and
    answered by each agent's worker itself (not the database, not a heartbeat); it returns as soon
    as every one has answered."""
    if not machine_ids:
        return {}
    answered: dict[int, float] = {}
    sent = time.monotonic()

    def on_reply(reply: dict) -> None:
        for worker in reply:
            machine_id = _agent_of(worker)
            if machine_id is not None:
                answered.setdefault(machine_id, round((time.monotonic() - sent) * 1000, 2))

    celery_app.control.ping(timeout=timeout, limit=len(machine_ids), callback=on_reply, matcher="pcre",
                            pattern=rf"^agent-({'|'.join(str(i) for i in machine_ids)})@")
    return {machine_id: answered.get(machine_id) for machine_id in machine_ids}


class NetworkPingView(APIView):
    @extend_schema(request=None, responses=PingOut)
    def post(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        timeout = settings.PING_TIMEOUT
        rtt = ping_agents([machine.pk], timeout)[machine.pk]
        detail = f"answered in {rtt} ms" if rtt is not None else f"no answer from its agent within {timeout:g} s"
        return Response(PingOut({"machine_id": machine.pk, "name": machine.name, "reachable": rtt is not None,
                                 "rtt_ms": rtt, "timeout_s": timeout, "detail": detail, "status": machine.status,
                                 "last_heartbeat": machine.last_heartbeat}).data)


class NetworkHealthCheckView(APIView):
    @extend_schema(request=None, responses=HealthCheckOut)
    def post(self, request):
        machines = list(machine_list())
        rtt = ping_agents([m.pk for m in machines], settings.PING_TIMEOUT)
        return Response({"results": [{"machine_id": m.pk, "name": m.name, "reachable": rtt[m.pk] is not None,
                                      "rtt_ms": rtt[m.pk], "status": m.status} for m in machines],
                         "healthy": sum(1 for value in rtt.values() if value is not None), "total": len(machines)})


class NetworkCapabilitiesView(APIView):
    """Capabilities of the machine the server runs on (TransformerLab's "this machine")."""

    @extend_schema(responses=CapabilitiesOut)
    def get(self, request):
        from torchyard.agent.capabilities import capabilities, load

        # Free disk where Torchyard keeps its data (the nearest folder that exists yet).
        where = next(p for p in (settings.DATA_DIR, *settings.DATA_DIR.parents) if p.exists())
        return Response({"capabilities": capabilities(str(where)), "current_load": load()})


class DistributedPlanView(APIView):
    """The dry run: the execution plan, nothing launched. The planned job is kept as a task; the plan's
    `job_id` is `plan-<task id>`, which the status and stop routes and distributed/dispatch take (the
    task's own id, `task_id`, is what /api/tasks/{task_id}/queue_distributed takes)."""

    @extend_schema(request=DistributedTrainingConfig, responses=DistributedPlanOut)
    def post(self, request):
        spec = seed_body(request)
        execution_plan = job_preview_plan(spec=JobSpec.from_json(spec)).to_json()
        task = plan_keep(spec=spec, owner=request.user)
        return Response({"job_id": plan_id(task), "task_id": task.pk, "execution_plan": execution_plan, "spec": spec})


class DistributedDispatchView(APIView):
    """The whole job (a DistributedTrainingConfig, with your own `job_id` or none, or
    `{"job_id": "plan-12"}` of a plan), or one rank of it to one machine (TransformerLab's dispatch
    body: `job_id`, `target_machine`, `rank`, `world_size` ...; a plan's `job_id` stands for its
    plugin_name, config and requirements, and any of those the body repeats must say what the plan
    says). A job_id of your own names one live job of yours at a time: the status and stop routes
    take it. Torchyard picks the master: a rank's `master_addr` is accepted when it names rank 0's
    machine and its `master_port` only when it is the port Torchyard picked when it scheduled the
    job; any other value is refused, saying why."""

    @extend_schema(
        request=PolymorphicProxySerializer("SeedDispatchIn", resource_type_field_name=None,
                                           serializers=[DistributedTrainingConfig, NamedDispatchIn, PlannedDispatchIn,
                                                        RankDispatchIn]),
        responses={201: DistributedJobStatusOut, 202: DistributedJobStatusOut, 200: DistributedJobStatusOut})
    def post(self, request):
        if is_rank_dispatch(request.data):
            body = RankDispatchIn(data=request.data)
            body.is_valid(raise_exception=True)
            answer, code = dispatch_rank(request=request, body=body.validated_data,
                                         given=given_fields(request.data, body.validated_data))
            return Response(DistributedJobStatusOut(answer).data, status=code)
        if is_named_dispatch(request.data):
            key = request.data["job_id"]
            job = named_job_submit(user=request.user, key=key, spec=seed_body(request, NamedDispatchIn, name=key))
            return Response(_status(Job.objects.get(pk=job.pk), seed_job_id=key), status=status.HTTP_201_CREATED)
        if is_planned_dispatch(request.data):
            task, job = planned_job_submit(request=request)
            return Response(_status(Job.objects.get(pk=job.pk), seed_job_id=plan_id(task)), status=status.HTTP_201_CREATED)
        job = job_submit(spec=JobSpec.from_json(seed_body(request)), owner=request.user)
        return Response(_status(Job.objects.get(pk=job.pk)), status=status.HTTP_201_CREATED)


JOB_ID = OpenApiParameter("job_id", str, OpenApiParameter.PATH, description=(
    "Torchyard's job id (digits), a plan's job_id (plan-12), or the job_id you named a job of yours with "
    "(dist_job_123: a whole job's, a per-rank dispatch's, execute_job's)"))


class DistributedStatusView(APIView):
    """`distributed/status/{job_id}` and `distributed_jobs/{job_id}/status` take the same ids, read one
    way: digits are Torchyard's job id (as they always were here, so callers of integer ids keep
    working); `plan-12`, the job_id distributed/plan answers, is the plan (`planned`) until it is
    queued, then the newest job it became; any other id is the name you gave a job of yours, whole or
    rank by rank (`dispatching` while its ranks come in, then the job; the newest job of that name).
    Since digits are never a plan's, a plan's id carries the `plan-` prefix, and no job of yours may be
    named with digits.
    An unknown id is a 404 saying so, one over 100 characters a 400."""

    @extend_schema(parameters=[JOB_ID], responses=DistributedJobStatusOut)
    def get(self, request, job_id: str):
        return Response(DistributedJobStatusOut(job_find_status(user=request.user, job_id=job_id)).data)


class DistributedStopView(APIView):
    """`distributed/stop/{job_id}`, the ids of the status route: a job stops, every node of it; the
    ranks of a per-rank dispatch still coming in are dropped (no later rank starts the job); a plan
    never queued has nothing running and stays as it is (it is a task: DELETE /api/tasks/{id}
    removes it), which the answer's status_reason says."""

    @extend_schema(parameters=[JOB_ID], request=None, responses=DistributedJobStatusOut)
    def post(self, request, job_id: str):
        return Response(DistributedJobStatusOut(job_find_stop(user=request.user, job_id=job_id)).data)


class SuggestMachinesView(APIView):
    """Online machines that fit, in the order a placement policy uses them: by default `spread` (the
    least loaded first), the order TransformerLab's bodies with machine_selection auto are placed in."""

    @extend_schema(responses=SuggestMachinesOut, parameters=[SuggestMachinesIn])
    def get(self, request):
        query = SuggestMachinesIn(data=request.query_params.dict())
        query.is_valid(raise_exception=True)
        wanted, gpus, memory, policy = (query.validated_data[k] for k in (
            "num_machines", "gpus_per_machine", "min_gpu_memory", "policy"))
        need = Need(procs=1, gpus=gpus, min_gpu_memory=memory)
        ranked = [c for c in order_machines(machine_candidates(), policy, need)
                  if c.schedulable and len(c.free_gpus(memory)) >= gpus]
        by_id = {m.pk: m for m in machine_list()}
        return Response({
            "suggested": [c.id for c in ranked[:wanted]],
            "enough": len(ranked) >= wanted,
            "machines": MachineOut([by_id[c.id] for c in ranked], many=True).data,
        })


class DispatchToMachineView(APIView):
    """The whole job on one machine (TransformerLab's remote job dispatch): a JobSpec, pinned there as one
    node with every process of the job (templates.services.on_one_machine)."""

    @extend_schema(request=JobSpecSerializer, responses={201: DistributedJobStatusOut})
    def post(self, request, machine_id: int):
        machine = get_object_or_404(Machine, pk=machine_id)
        validated = JobSpecSerializer(data=request.data)
        validated.is_valid(raise_exception=True)
        admitted = admit_spec(validated.validated_data, user=request.user)
        job = job_submit(spec=JobSpec.from_json(on_one_machine(admitted, machine.name)), owner=request.user)
        return Response(_status(Job.objects.get(pk=job.pk)), status=status.HTTP_201_CREATED)


# --- a job on one machine (the seed's remote jobs) ---------------------------------------------------
# Their job ids are the status route's (ids.py), and what one names must be on the machine: a job with
# a node there or pinned to it, ranks coming in one of which targets it; else a 404 saying so.
class MachineJobStatusView(APIView):
    """`/api/network/machines/{id}/job_status/{job_id}`: the job's status with its nodes on that machine
    (ranks of a per-rank dispatch still coming in: those that target it)."""

    @extend_schema(parameters=[JOB_ID], responses=DistributedJobStatusOut)
    def get(self, request, machine_id: int, job_id: str):
        machine = get_object_or_404(Machine, pk=machine_id)
        return Response(DistributedJobStatusOut(job_find_status(user=request.user, job_id=job_id, machine=machine)).data)


class MachineStopJobView(APIView):
    """`/api/network/machines/{id}/stop_job/{job_id}`: stops the job, all of its nodes (one node
    alone cannot stop: the job would recover it), as `POST /api/jobs/{id}/stop`, and answers its
    nodes on that machine; ranks of a per-rank dispatch still coming in are dropped, all of them."""

    @extend_schema(parameters=[JOB_ID], request=None, responses=DistributedJobStatusOut)
    def post(self, request, machine_id: int, job_id: str):
        machine = get_object_or_404(Machine, pk=machine_id)
        return Response(DistributedJobStatusOut(job_find_stop(user=request.user, job_id=job_id, machine=machine)).data)


class ExecuteJobView(APIView):
    """`/api/network/execute_job`: run a job now (what TransformerLab's coordinator machine asked of a machine).
    Here the control plane places it, on the machine `target_machine` names when given (the whole
    job there, as dispatch_job), else where the planner chooses. Its `job_id`, when given, names the
    job as a whole-job dispatch's does: distributed/status/{job_id} and distributed/stop/{job_id} take it."""

    @extend_schema(request=ExecuteJobIn, responses={201: DistributedJobStatusOut})
    def post(self, request):
        body = ExecuteJobIn(data=request.data)
        body.is_valid(raise_exception=True)
        validated = admit_spec(body.validated_data["job_data"], user=request.user, under="job_data")
        if body.validated_data.get("target_machine"):
            machine = machine_called(body.validated_data["target_machine"], field="target_machine")
            validated = on_one_machine(validated, machine.name)
        key = body.validated_data.get("job_id")
        job = (named_job_submit(user=request.user, key=key, spec=validated) if key
               else job_submit(spec=JobSpec.from_json(validated), owner=request.user))
        return Response(_status(Job.objects.get(pk=job.pk), seed_job_id=key), status=status.HTTP_201_CREATED)


class LocalJobStatusView(APIView):
    """`/api/network/local_job_status/{job_id}`: what TransformerLab's coordinator machine polled, the job's
    status; the ids and answers of `distributed/status/{job_id}`."""

    @extend_schema(parameters=[JOB_ID], responses=DistributedJobStatusOut)
    def get(self, request, job_id: str):
        return Response(DistributedJobStatusOut(job_find_status(user=request.user, job_id=job_id)).data)


class PrepareDependenciesIn(StrictFields, serializers.Serializer):
    bundle = serializers.RegexField(r"^[0-9a-f]{64}$", required=False,
                                    help_text="a bundle you uploaded: fetched and unpacked, its requirements.txt installed")
    pip = serializers.ListField(child=serializers.CharField(max_length=500), default=list, max_length=200)
    machines = serializers.ListField(child=serializers.CharField(max_length=100), default=list,
                                     help_text="names or ids; default: every online machine")

    def validate_pip(self, value: list[str]) -> list[str]:
        return RuntimeSerializer().validate_pip(value)


class PrepareDependenciesView(APIView):
    """TransformerLab's "prepare dependencies": warm the chosen machines' caches (the bundle, the
    environment of its requirements and `pip`) before a job needs them. Asynchronous: each
    machine's heartbeat lists what its cache holds (`capabilities.cache`)."""

    permission_classes = [CanSubmitSomewhere]

    @extend_schema(request=PrepareDependenciesIn, responses={202: PrepareDependenciesOut})
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
# Their job ids are the status route's (ids.py); one that names no job yet (ranks still coming in, a plan
# never queued) is a 404 saying why.
class LocalJobFileView(APIView):
    """`/api/network/local_job_file/{job_id}/{key}`: the output file at path `key` (the newest
    attempt's, the lowest node rank's when several nodes wrote it)."""

    renderer_classes = DOWNLOAD_RENDERERS

    @extend_schema(parameters=[JOB_ID], responses={(200, "application/octet-stream"): OpenApiTypes.BINARY})
    def get(self, request, job_id: str, key: str):
        found = job_find_job(user=request.user, job_id=job_id)
        assert found.job is not None
        artifact = found.job.artifacts.filter(path=key).order_by("-attempt", "node_rank").first()
        if artifact is None:
            raise NotFound(f"job {found_label(found)} has no output file {key!r}.")
        return artifact_response(artifact)


class LocalJobOutputView(APIView):
    """`/api/network/local_job_output/{job_id}`: the job's status, its output files and its last log lines."""

    @extend_schema(parameters=[JOB_ID], responses=LocalJobOutputOut)
    def get(self, request, job_id: str):
        job = job_find_job(user=request.user, job_id=job_id).job
        assert job is not None
        lines = job.events.filter(type="log").order_by("-id")[:100]
        return Response({
            "job_id": job.pk,
            "status": job.status,
            "files": ArtifactOut(job.artifacts.all(), many=True).data,
            "output": [f"[rank {e.rank}] {e.payload.get('line', '')}" for e in reversed(list(lines))],
        })

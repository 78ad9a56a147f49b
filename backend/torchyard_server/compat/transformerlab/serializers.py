"""What TransformerLab's `/api/network/*` routes answer, in its shapes."""

from __future__ import annotations

from rest_framework import serializers

from ...artifacts.serializers import ArtifactOut
from ...jobs.api.serializers import PlanOut
from ...jobs.intake.serializer import JobSpecSerializer
from ...jobs.models import Job, JobNode
from ...jobs.placement.policies import policy_names
from ...machines.models import Machine
from ...machines.serializers import MachineOut
from ...rest.strict import StrictFields
from .plans import own_id_refusal


class MessageOut(serializers.Serializer):
    message = serializers.CharField()


class NetworkStatusOut(serializers.Serializer):
    total_machines = serializers.IntegerField()
    pending = serializers.IntegerField(help_text="machines in each status")
    online = serializers.IntegerField()
    busy = serializers.IntegerField()
    draining = serializers.IntegerField()
    quarantined = serializers.IntegerField()
    offline = serializers.IntegerField()
    total_cpus = serializers.IntegerField(help_text="of the machines that take jobs (online or busy)")
    total_gpus = serializers.IntegerField(help_text="of the machines that take jobs (online or busy)")
    machines = MachineOut(many=True)


class PingOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    name = serializers.CharField()
    reachable = serializers.BooleanField(help_text="its agent answered over the broker")
    rtt_ms = serializers.FloatField(allow_null=True, help_text="the round trip to its agent and back; null without an answer")
    timeout_s = serializers.FloatField(help_text="how long an answer was waited for")
    detail = serializers.CharField(help_text='"answered in 2.1 ms", or "no answer from its agent within 5 s"')
    status = serializers.ChoiceField(choices=Machine.Status.choices)
    last_heartbeat = serializers.DateTimeField(allow_null=True)


class HealthCheckResultOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    name = serializers.CharField()
    reachable = serializers.BooleanField()
    rtt_ms = serializers.FloatField(allow_null=True, help_text="the round trip to its agent and back; null without an answer")
    status = serializers.ChoiceField(choices=Machine.Status.choices)


class HealthCheckOut(serializers.Serializer):
    results = HealthCheckResultOut(many=True)
    healthy = serializers.IntegerField(help_text="how many answered")
    total = serializers.IntegerField()


class CapabilitiesOut(serializers.Serializer):
    capabilities = serializers.DictField(help_text="cpu_count, memory, disk_space, gpu_count, gpu_memory, gpus, ...")
    current_load = serializers.DictField(help_text="cpu_usage, memory_usage, gpu_usage")


class DistributedPlanOut(serializers.Serializer):
    job_id = serializers.CharField(help_text=(
        "the planned job, plan-<task_id> (the same plan again, never queued, is the same one): poll and stop "
        "it with distributed/status/{job_id} and distributed/stop/{job_id} (planned until it is queued, then "
        "the job it became), queue it with /api/tasks/{task_id}/queue_distributed, or dispatch it with "
        "{\"job_id\": ...} (whole, or rank by rank)"))
    task_id = serializers.IntegerField(help_text="the task the plan was kept as (/api/tasks/{task_id})")
    execution_plan = PlanOut()
    spec = serializers.DictField(help_text="the JobSpec the request became")


class DistributedNodeStatusOut(serializers.Serializer):
    machine_id = serializers.IntegerField(allow_null=True, help_text="null once the machine is removed")
    machine_name = serializers.CharField()
    rank = serializers.IntegerField(help_text="the node's rank")
    ranks = serializers.ListField(child=serializers.IntegerField(), min_length=2, max_length=2,
                                  help_text="its first and last global rank")
    status = serializers.ChoiceField(choices=JobNode.Status.choices)
    start_time = serializers.DateTimeField(allow_null=True)
    end_time = serializers.DateTimeField(allow_null=True)
    progress = serializers.FloatField(allow_null=True, help_text="percent of the job's total steps")


# A job's states, and a plan's before it is queued (a DistributedJobStatus answered for a plan's job_id).
PLANNED = "planned"
STATUS_CHOICES = [*Job.Status.choices, (PLANNED, "Planned, not queued")]


class DistributedJobStatusOut(serializers.Serializer):
    """TransformerLab's DistributedJobStatus."""

    job_id = serializers.IntegerField(allow_null=True, help_text=(
        "Torchyard's job id; null while the ranks of a per-rank dispatch are coming in, and for a plan never queued"))
    seed_job_id = serializers.CharField(allow_null=True, help_text=(
        "the TransformerLab job_id this job is known by when it is not Torchyard's: the name its dispatch (whole, "
        "rank by rank, or execute_job) gave it (\"dist_job_123\") or its plan's job_id (\"plan-12\"); null otherwise"))
    status = serializers.ChoiceField(choices=STATUS_CHOICES, help_text="the job's; `planned`: a plan not queued yet")
    status_reason = serializers.CharField(allow_blank=True)
    world_size = serializers.IntegerField(allow_null=True)
    attempt = serializers.IntegerField()
    master_addr = serializers.CharField(allow_blank=True)
    master_port = serializers.IntegerField(allow_null=True)
    nodes = DistributedNodeStatusOut(many=True)
    waiting_for_ranks = serializers.ListField(child=serializers.IntegerField(), help_text=(
        "the ranks a per-rank dispatch still waits for (the job is submitted once every rank is in)"))


class ExecuteJobIn(StrictFields, serializers.Serializer):
    """TransformerLab's remote execution: a job, as a JobSpec, to run now."""

    job_data = JobSpecSerializer(help_text="the JobSpec (DESIGN.md section 4)")
    job_id = serializers.CharField(max_length=100, required=False, allow_null=True, help_text=(
        "the caller's own id for the job (dist_job_123), given back as seed_job_id: every route with a {job_id} "
        "takes it (distributed/status, distributed/stop, machines/{id}/job_status, local_job_status, ...). Never "
        "digits (Torchyard's job ids) nor plan-<number> (a plan's: distributed/dispatch runs a plan)"))
    target_machine = serializers.CharField(max_length=255, required=False, allow_blank=True, help_text=(
        "a machine's name, id or host: the whole job on it; else where the planner chooses"))

    def validate_job_id(self, value: str | None) -> str | None:
        if value is not None and (refusal := own_id_refusal(value, takes_plans=False)):
            raise serializers.ValidationError(refusal)
        return value


# What suggest_machines orders by when not told: the order of TransformerLab's machine_selection auto.
SUGGEST_POLICY = "spread"


class SuggestMachinesIn(StrictFields, serializers.Serializer):
    """suggest_machines' query (the dashboard's, and TransformerLab's Torchyard extras)."""

    shown_only = ("format",)  # DRF's own: ?format=json

    num_machines = serializers.IntegerField(min_value=1, default=1, help_text="how many machines")
    gpus_per_machine = serializers.IntegerField(min_value=0, default=0, help_text="free GPUs each must have")
    min_gpu_memory = serializers.IntegerField(min_value=0, default=0, help_text="MB each of those GPUs must have")
    policy = serializers.CharField(max_length=100, default=SUGGEST_POLICY, help_text=(
        "the placement policy whose order the machines come in (a JobSpec's placement.policy); spread, the "
        "order of TransformerLab's machine_selection auto, unless told"))

    def validate_policy(self, value: str) -> str:
        names = policy_names()
        if value not in names:
            raise serializers.ValidationError(f"unknown placement policy {value!r}; choose one of: {', '.join(names)}.")
        return value


class SuggestMachinesOut(serializers.Serializer):
    suggested = serializers.ListField(child=serializers.IntegerField(), help_text="machine ids, as many as asked for")
    enough = serializers.BooleanField(help_text="as many machines fit as were asked for")
    machines = MachineOut(many=True, help_text="every machine that fits, in the planner's order")


class PreparingMachineOut(serializers.Serializer):
    machine_id = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=["preparing"])


class PrepareDependenciesOut(serializers.Serializer):
    machines = PreparingMachineOut(many=True)


class LocalJobOutputOut(serializers.Serializer):
    job_id = serializers.IntegerField()
    status = serializers.ChoiceField(choices=Job.Status.choices)
    files = ArtifactOut(many=True)
    output = serializers.ListField(child=serializers.CharField(), help_text="its last 100 log lines, `[rank N] line`")

from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import Job, JobNode
from .spec import public_spec


class RecipeOut(serializers.Serializer):
    entrypoint = serializers.CharField(help_text="what a JobSpec's entrypoint names, e.g. examples/mlp_ddp.py")
    summary = serializers.CharField(help_text="the first paragraph of the recipe's docstring")


class PlanNodeOut(serializers.Serializer):
    node_rank = serializers.IntegerField()
    machine_id = serializers.IntegerField()
    machine_name = serializers.CharField()
    host = serializers.CharField()
    nproc = serializers.IntegerField()
    rank_start = serializers.IntegerField()
    rank_end = serializers.IntegerField()
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the machine")


class PlanPreflightOut(serializers.Serializer):
    master = serializers.CharField(help_text="host:port every node must reach before any rank starts")
    versions = serializers.DictField(child=serializers.CharField(), help_text="each machine's torch and Python versions, by name")


class PlanOut(serializers.Serializer):
    """The execution plan: where each node runs, and the hyperparameters after the distributed
    adjustments (DESIGN.md section 7)."""

    world_size = serializers.IntegerField()
    nnodes = serializers.IntegerField()
    procs_per_node = serializers.IntegerField()
    master_addr = serializers.CharField()
    master_port = serializers.IntegerField()
    backend = serializers.ChoiceField(choices=["gloo", "nccl"])
    nodes = PlanNodeOut(many=True)
    hyperparameters = serializers.DictField()
    warnings = serializers.ListField(child=serializers.CharField())
    # Plans stored before preflight existed have none.
    preflight = PlanPreflightOut(required=False)


class NodeMachineOut(serializers.Serializer):
    id = serializers.IntegerField(source="machine_id", allow_null=True, help_text="null once the machine is removed")
    name = serializers.CharField(source="machine_name")
    host = serializers.CharField()


class JobSummaryOut(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    project = serializers.CharField(source="project.name")
    progress = serializers.DictField(help_text="step, total_steps, throughput, loss, eta_seconds and what the ranks report")

    class Meta:
        model = Job
        fields = [
            "id", "name", "status", "status_reason", "world_size", "attempt", "restarts", "progress",
            "created_at", "started_at", "finished_at", "owner", "project",
        ]


class JobNodeOut(serializers.ModelSerializer):
    machine = NodeMachineOut(source="*")
    gpus = serializers.ListField(child=serializers.IntegerField(), help_text="GPU indexes on the machine")
    progress = serializers.DictField()

    class Meta:
        model = JobNode
        fields = [
            "id", "attempt", "node_rank", "machine", "nproc", "rank_start", "rank_end", "gpus", "status",
            "status_reason", "exit_code", "pid", "last_heartbeat", "progress", "started_at", "finished_at",
        ]


class JobDetailOut(JobSummaryOut):
    spec = serializers.DictField(help_text="the validated JobSpec; secret_env values as ***")
    plan = PlanOut(allow_null=True, help_text="null until the job is dispatched")
    nodes = serializers.SerializerMethodField()

    class Meta(JobSummaryOut.Meta):
        fields = [*JobSummaryOut.Meta.fields, "spec", "plan", "master_addr", "master_port", "nodes"]

    def to_representation(self, job: Job) -> dict:
        # Every route and stream that shows a job's spec comes through here: secrets as ***.
        data = super().to_representation(job)
        data["spec"] = public_spec(data["spec"] or {})
        return data

    @extend_schema_field(JobNodeOut(many=True))
    def get_nodes(self, job: Job) -> list[dict]:
        # The current attempt's nodes; earlier attempts are in /api/jobs/{id}/nodes?attempt=N.
        nodes = [n for n in job.nodes.all() if n.attempt == job.attempt]
        return JobNodeOut(nodes, many=True).data


def job_detail_data(job: Job) -> dict:
    return JobDetailOut(job).data


def job_summary_data(job: Job) -> dict:
    return JobSummaryOut(job).data

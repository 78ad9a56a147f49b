from __future__ import annotations

from rest_framework import serializers

from .models import Job, JobNode
from .spec import public_spec


class JobSummaryOut(serializers.ModelSerializer):
    owner = serializers.CharField(source="owner.username")
    project = serializers.CharField(source="project.name")

    class Meta:
        model = Job
        fields = [
            "id", "name", "status", "status_reason", "world_size", "attempt", "restarts", "progress",
            "created_at", "started_at", "finished_at", "owner", "project",
        ]


class JobNodeOut(serializers.ModelSerializer):
    machine = serializers.SerializerMethodField()

    class Meta:
        model = JobNode
        fields = [
            "id", "attempt", "node_rank", "machine", "nproc", "rank_start", "rank_end", "gpus", "status",
            "status_reason", "exit_code", "pid", "last_heartbeat", "progress", "started_at", "finished_at",
        ]

    def get_machine(self, node: JobNode) -> dict:
        return {"id": node.machine_id, "name": node.machine_name, "host": node.host}


class JobDetailOut(JobSummaryOut):
    nodes = serializers.SerializerMethodField()

    class Meta(JobSummaryOut.Meta):
        fields = [*JobSummaryOut.Meta.fields, "spec", "plan", "master_addr", "master_port", "nodes"]

    def to_representation(self, job: Job) -> dict:
        # Every route and stream that shows a job's spec comes through here: secrets as ***.
        data = super().to_representation(job)
        data["spec"] = public_spec(data["spec"] or {})
        return data

    def get_nodes(self, job: Job) -> list[dict]:
        # The current attempt's nodes; earlier attempts are in /api/jobs/{id}/nodes?attempt=N.
        nodes = [n for n in job.nodes.all() if n.attempt == job.attempt]
        return JobNodeOut(nodes, many=True).data


def job_detail_data(job: Job) -> dict:
    return JobDetailOut(job).data


def job_summary_data(job: Job) -> dict:
    return JobSummaryOut(job).data

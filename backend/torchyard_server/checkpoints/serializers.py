from rest_framework import serializers

from ..jobs.models import Job
from ..jobs.serializers import JobNodeOut
from .models import CheckpointManifest


class CheckpointFileOut(serializers.Serializer):
    path = serializers.CharField(help_text="relative to the checkpoint's directory")
    # As the job's SDK wrote them in its manifest.
    size = serializers.IntegerField(required=False)
    sha256 = serializers.CharField(required=False)


class CheckpointOut(serializers.ModelSerializer):
    files = CheckpointFileOut(many=True)

    class Meta:
        model = CheckpointManifest
        fields = ["id", "job", "step", "attempt", "uri", "world_size", "files", "total_bytes", "committed_at", "verified"]


class JobReportOut(serializers.Serializer):
    """GET /api/jobs/{id}/summary (seed 001's job summary): progress, and how each node is doing."""

    id = serializers.IntegerField()
    name = serializers.CharField()
    status = serializers.ChoiceField(choices=Job.Status.choices)
    status_reason = serializers.CharField(allow_blank=True)
    attempt = serializers.IntegerField()
    world_size = serializers.IntegerField(allow_null=True)
    progress = serializers.DictField(help_text="step, total_steps, throughput, loss, eta_seconds and what the ranks report")
    duration_seconds = serializers.FloatField(allow_null=True, help_text="since it started; null until then")
    nodes = JobNodeOut(many=True, help_text="the current attempt's nodes")
    checkpoints = serializers.IntegerField(help_text="how many committed checkpoints it has")

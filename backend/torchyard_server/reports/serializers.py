"""What a job report answers (the Rust coordinator's job summary), built from jobs and checkpoints."""

from rest_framework import serializers

from ..jobs.api.serializers import JobNodeOut
from ..jobs.models import Job


class JobReportOut(serializers.Serializer):
    """GET /api/jobs/{id}/summary (the Rust coordinator's job summary): progress, and how each node is doing."""

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
    # The Rust coordinator's "steps, throughput, ETA", read from `progress` (folded by jobs.services.job_record_progress).
    project = serializers.CharField()
    owner = serializers.CharField()
    restarts = serializers.IntegerField()
    step = serializers.IntegerField(allow_null=True, help_text="the latest step any rank reported")
    total_steps = serializers.IntegerField(allow_null=True, help_text=(
        "declared by the script (sdk.set_total_steps, or report(total_steps=...)), else read from a `--steps` argument"))
    percent = serializers.FloatField(allow_null=True)
    steps_per_second = serializers.FloatField(allow_null=True, help_text="over the current attempt so far")
    samples_per_second = serializers.FloatField(allow_null=True, help_text=(
        "every rank's latest `samples_per_second` (or, for a script that reports none, `throughput`), summed"))
    throughput = serializers.FloatField(allow_null=True, help_text="every rank's latest `throughput`, summed")
    loss = serializers.FloatField(allow_null=True)
    eta_seconds = serializers.FloatField(allow_null=True, help_text="(total_steps - step) / steps_per_second")
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    last_checkpoint_step = serializers.IntegerField(allow_null=True)

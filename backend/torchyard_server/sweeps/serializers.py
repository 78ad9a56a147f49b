from __future__ import annotations

from rest_framework import serializers

from .models import Sweep, Trial


class TrialOut(serializers.ModelSerializer):
    job_status = serializers.CharField(source="job.status", allow_null=True, default=None,
                                       help_text="its job's status (null once the job was deleted)")
    params = serializers.DictField(help_text="its point of the space: the hyperparameters it ran with")

    class Meta:
        model = Trial
        fields = ["number", "job", "job_status", "status", "params", "value", "step", "reason", "created_at",
                  "finished_at"]


class BestTrialOut(serializers.Serializer):
    number = serializers.IntegerField()
    job = serializers.IntegerField(allow_null=True)
    hyperparameters = serializers.DictField()
    metric = serializers.FloatField(help_text="its value of the searcher's metric")


class SweepCountsOut(serializers.Serializer):
    running = serializers.IntegerField()
    completed = serializers.IntegerField()
    pruned = serializers.IntegerField()
    failed = serializers.IntegerField()
    stopped = serializers.IntegerField()
    max_trials = serializers.IntegerField()


class SweepSummaryOut(serializers.ModelSerializer):
    project = serializers.CharField(source="project.name")
    owner = serializers.CharField(source="owner.username")
    counts = SweepCountsOut()
    best_trial = BestTrialOut(allow_null=True)

    class Meta:
        model = Sweep
        fields = ["id", "name", "project", "owner", "status", "reason", "counts", "best_trial", "created_at",
                  "finished_at"]


class SweepOut(SweepSummaryOut):
    """A sweep with its spec and every trial."""

    spec = serializers.DictField(help_text="as submitted, with the searcher's defaults filled in")
    trials = TrialOut(many=True)

    class Meta(SweepSummaryOut.Meta):
        fields = [*SweepSummaryOut.Meta.fields, "spec", "trials"]

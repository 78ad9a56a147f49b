from __future__ import annotations

from rest_framework import serializers

from ..artifacts.serializers import ArtifactOut
from ..checkpoints.serializers import CheckpointOut
from ..jobs.api.serializers import JobNodeOut
from ..streaming.serializers import MetricBucketOut, MetricSummaryOut
from .runs import RUN_ID


class RunOut(serializers.Serializer):
    run_id = serializers.CharField(help_text="<job id>.<attempt>")
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    name = serializers.CharField()
    project = serializers.CharField()
    owner = serializers.CharField()
    status = serializers.CharField(help_text=(
        "The job's status for its current attempt; an earlier attempt is `failed` (a node failed or was "
        "lost and the job recovered) or `stopped`."))
    status_reason = serializers.CharField(allow_blank=True)
    world_size = serializers.IntegerField(allow_null=True)
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    hyperparameters = serializers.DictField(help_text="The spec's hyperparameters, as submitted.")


class FinalMetricOut(serializers.Serializer):
    name = serializers.CharField()
    goal = serializers.ChoiceField(choices=["min", "max"], allow_null=True,
                                   help_text="Which way is better, guessed from the name (loss: min, accuracy: max).")
    last = serializers.FloatField(help_text="The final value: the last one reported.")
    last_step = serializers.IntegerField(allow_null=True)
    best = serializers.FloatField(allow_null=True, help_text="min or max, as the goal says; null without one.")


class RunRowOut(RunOut):
    final_metrics = FinalMetricOut(many=True, help_text="Every metric the run reported, by name.")


class RunMetricOut(MetricSummaryOut):
    name = serializers.CharField()


class RunDetailOut(RunOut):
    spec = serializers.DictField(help_text="The job's spec (secrets as ***).")
    nodes = JobNodeOut(many=True, help_text="This attempt's nodes.")
    metrics = RunMetricOut(many=True, help_text="Every metric this attempt reported: its last value, min, max, mean.")
    checkpoints = CheckpointOut(many=True, help_text="Committed during this attempt (and kept).")
    artifacts = ArtifactOut(many=True, help_text="Collected from this attempt's nodes.")


class CompareIn(serializers.Serializer):
    runs = serializers.ListField(child=serializers.RegexField(RUN_ID.pattern), min_length=1, max_length=20,
                                 help_text="Run ids, <job id>.<attempt>, in the order to show them.")
    metrics = serializers.ListField(child=serializers.CharField(max_length=200), required=False, allow_empty=False,
                                    help_text="Default: every metric any of the runs reported.")
    goals = serializers.DictField(child=serializers.ChoiceField(choices=["min", "max"]), required=False, help_text=(
        "Which way is better per metric (`best`), e.g. {\"acc\": \"max\"}; guessed from the name otherwise "
        "(loss, error ... min; accuracy, f1, score ... max)."))
    points = serializers.IntegerField(min_value=1, max_value=2000, default=200, help_text="Buckets on the shared step grid.")
    from_step = serializers.IntegerField(min_value=0, required=False)
    to_step = serializers.IntegerField(min_value=0, required=False)

    def validate(self, attrs):
        if len(set(attrs["runs"])) != len(attrs["runs"]):
            raise serializers.ValidationError({"runs": ["each run once."]})
        if "from_step" in attrs and "to_step" in attrs and attrs["to_step"] < attrs["from_step"]:
            raise serializers.ValidationError({"to_step": ["must be >= from_step."]})
        return attrs


class HyperparameterRowOut(serializers.Serializer):
    name = serializers.CharField(help_text="Nested hyperparameters are dotted: optimizer.lr.")
    values = serializers.ListField(child=serializers.JSONField(allow_null=True), help_text="One per run, in the runs' order.")
    differs = serializers.BooleanField()


class ComparedValueOut(serializers.Serializer):
    """One run's numbers for one metric; all null (count 0) where the run never reported it."""

    last = serializers.FloatField(allow_null=True, help_text="The final value: the last one reported.")
    last_step = serializers.IntegerField(allow_null=True)
    min = serializers.FloatField(allow_null=True)
    max = serializers.FloatField(allow_null=True)
    mean = serializers.FloatField(allow_null=True)
    count = serializers.IntegerField()
    best = serializers.FloatField(allow_null=True, help_text="min or max, as the metric's goal says; null without one.")


class ComparedMetricOut(serializers.Serializer):
    name = serializers.CharField()
    goal = serializers.ChoiceField(choices=["min", "max"], allow_null=True)
    values = ComparedValueOut(many=True, help_text="One per run, in the runs' order.")


class ComparedSeriesOut(serializers.Serializer):
    name = serializers.CharField()
    runs = serializers.ListField(child=MetricBucketOut(many=True), help_text="Per run (in the runs' order), its buckets.")


class CompareOut(serializers.Serializer):
    runs = RunOut(many=True)
    hyperparameters = HyperparameterRowOut(many=True)
    metrics = ComparedMetricOut(many=True)
    from_step = serializers.IntegerField(allow_null=True)
    to_step = serializers.IntegerField(allow_null=True)
    bucket_steps = serializers.IntegerField(allow_null=True, help_text="Steps per bucket of the grid every run shares.")
    series = ComparedSeriesOut(many=True)

from rest_framework import serializers

from .models import Artifact, FunctionResult


class ArtifactOut(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "attempt", "node_rank", "path", "size", "sha256", "created_at"]


class FunctionResultOut(serializers.ModelSerializer):
    machine = serializers.CharField(source="machine_name", help_text="the machine the rank ran on")
    has_value = serializers.SerializerMethodField(
        help_text="a pickle to download (the return value, or the exception when it could be pickled)")

    class Meta:
        model = FunctionResult
        fields = ["rank", "node_rank", "machine", "attempt", "ok", "size", "sha256", "repr", "error_type", "error",
                  "traceback", "raised_at", "peer_failure", "has_value", "created_at"]

    def get_has_value(self, result: FunctionResult) -> bool:
        return bool(result.uri)


class FunctionResultsOut(serializers.Serializer):
    function = serializers.CharField(help_text="the function's qualified name")
    status = serializers.CharField(help_text="the job's status")
    attempt = serializers.IntegerField(help_text="the attempt the results are of: the job's last")
    world_size = serializers.IntegerField(allow_null=True, help_text="how many results a completed job has")
    results = FunctionResultOut(many=True, help_text="one per rank that returned or raised, in rank order")

from rest_framework import serializers

from .models import CheckpointManifest


class CheckpointFileOut(serializers.Serializer):
    path = serializers.CharField(help_text="relative to the checkpoint's directory")
    # As the job's SDK wrote them in its manifest.
    size = serializers.IntegerField(required=False)
    sha256 = serializers.CharField(required=False)
    holders = serializers.ListField(child=serializers.CharField(), required=False,
                                    help_text="memory checkpoints: the machines whose agents hold this file")

    class Meta:
        optional_fields = ('size', 'sha256', 'holders')


class CheckpointOut(serializers.ModelSerializer):
    files = CheckpointFileOut(many=True)

    class Meta:
        model = CheckpointManifest
        fields = [
            "id", "job", "step", "attempt", "tier", "uri", "world_size", "files", "total_bytes", "committed_at", "verified",
            "saved_async", "blocking_seconds", "background_seconds",
        ]  # fmt: skip

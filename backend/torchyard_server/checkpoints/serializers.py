from rest_framework import serializers

from .models import CheckpointManifest


class CheckpointOut(serializers.ModelSerializer):
    class Meta:
        model = CheckpointManifest
        fields = ["id", "job", "step", "attempt", "uri", "world_size", "files", "total_bytes", "committed_at", "verified"]

from rest_framework import serializers

from .models import Artifact


class ArtifactOut(serializers.ModelSerializer):
    class Meta:
        model = Artifact
        fields = ["id", "attempt", "node_rank", "path", "size", "sha256", "created_at"]

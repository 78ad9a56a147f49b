from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..listing import FlatListSerializer
from .models import Machine
from .registries import machine_usage


class MachineUsageOut(serializers.Serializer):
    project = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs its live nodes hold here")
    processes = serializers.IntegerField(help_text="processes its live nodes run here")


class MachineOut(serializers.ModelSerializer):
    usage = serializers.SerializerMethodField(help_text=(
        "What each project's live jobs take here; project names and counts only, so everyone who sees "
        "the cluster sees who uses it and no one sees other projects' jobs."))
    class Meta:
        model = Machine
        fields = [
            "id", "name", "host", "port", "status", "drained", "capabilities", "current_load", "labels",
            "agent_version", "last_heartbeat", "created_at", "usage",
        ]
        # A thousand machines are listed on every GET /api/machines and cluster-stream snapshot.
        list_serializer_class = FlatListSerializer

    @extend_schema_field(MachineUsageOut(many=True))
    def get_usage(self, machine: Machine) -> list[dict]:
        # Looked up once per response: a list's items share their root serializer's context.
        if "usage" not in self.context:
            self.context["usage"] = machine_usage()
        return self.context["usage"].get(machine.pk, [])


class MachineIn(serializers.Serializer):
    name = serializers.RegexField(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$", max_length=100, error_messages={
        "invalid": "letters, digits, '.', '_' and '-' only, starting with a letter or digit."})
    host = serializers.CharField(max_length=255)
    port = serializers.IntegerField(min_value=1, max_value=65535, default=8001)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), default=dict)

    def validate_name(self, value: str) -> str:
        if Machine.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a machine named {value!r} already exists.")
        return value


class MachinePatch(serializers.Serializer):
    host = serializers.CharField(max_length=255, required=False)
    port = serializers.IntegerField(min_value=1, max_value=65535, required=False)
    labels = serializers.DictField(child=serializers.CharField(max_length=200), required=False)
    status = serializers.ChoiceField(choices=["draining", "online"], required=False, help_text=(
        "draining: no new nodes are placed here; online: undo draining."))

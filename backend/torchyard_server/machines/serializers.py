from __future__ import annotations

from rest_framework import serializers

from .models import Machine


class MachineOut(serializers.ModelSerializer):
    class Meta:
        model = Machine
        fields = [
            "id", "name", "host", "port", "status", "drained", "capabilities", "current_load", "labels",
            "agent_version", "last_heartbeat", "created_at",
        ]


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

from __future__ import annotations

from rest_framework import serializers

from .models import AuditEntry


class AuditEntryOut(serializers.ModelSerializer):
    actor = serializers.CharField(source="actor_label", help_text='a username, "machine <id>" or "system"')
    actor_id = serializers.IntegerField(allow_null=True, help_text="the user's id, while the account exists")
    project = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)

    class Meta:
        model = AuditEntry
        fields = ["id", "created", "actor", "actor_id", "action", "target_type", "target_id", "target_label",
                  "project", "detail", "source_ip"]
        read_only_fields = fields


class AuditQuery(serializers.Serializer):
    """The filters of GET /api/audit; each one given must match."""

    actor = serializers.CharField(required=False, max_length=150, help_text='username, "machine <id>" or "system"')
    action = serializers.ChoiceField(choices=AuditEntry.Action.choices, required=False)
    target_type = serializers.CharField(required=False, max_length=40, help_text="job, machine, project, user, ...")
    target_id = serializers.CharField(required=False, max_length=64)
    project = serializers.CharField(required=False, max_length=63, help_text="a project's name")
    since = serializers.DateTimeField(required=False, help_text="entries at or after this time (ISO 8601)")
    until = serializers.DateTimeField(required=False, help_text="entries before this time (ISO 8601)")

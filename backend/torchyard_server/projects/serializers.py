from __future__ import annotations

from rest_framework import serializers

from .models import PROJECT_NAME, Membership, Project


class ProjectOut(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="your role in it (staff: admin)")

    class Meta:
        model = Project
        fields = ["id", "name", "description", "created_at", "role"]

    def get_role(self, project: Project) -> str | None:
        return self.context.get("roles", {}).get(project.pk)


class ProjectIn(serializers.Serializer):
    name = serializers.RegexField(PROJECT_NAME, max_length=63, error_messages={
        "invalid": "lowercase letters, digits, '.', '_' and '-' only, starting with a letter or digit."})
    description = serializers.CharField(max_length=2000, allow_blank=True, default="")

    def validate_name(self, value: str) -> str:
        if Project.objects.filter(name=value).exists():
            raise serializers.ValidationError(f"a project named {value!r} already exists.")
        return value


class MembershipOut(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username")

    class Meta:
        model = Membership
        fields = ["username", "role", "created_at"]


class MembershipIn(serializers.Serializer):
    username = serializers.CharField(max_length=150)
    role = serializers.ChoiceField(choices=Membership.Role.choices, default=Membership.Role.MEMBER)


class RoleIn(serializers.Serializer):
    role = serializers.ChoiceField(choices=Membership.Role.choices)

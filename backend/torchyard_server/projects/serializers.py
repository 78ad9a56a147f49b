from __future__ import annotations

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from .models import PROJECT_NAME, Membership, Project
from .priorities import ADMIN_CEILING_MAX, PRIORITY_MAX, PRIORITY_MIN, BadPriority, parse_priority


class ProjectHeldOut(serializers.Serializer):
    gpus = serializers.IntegerField(help_text="GPUs its live nodes hold now")
    processes = serializers.IntegerField(help_text="processes (ranks) its live nodes run now")


class ProjectOut(serializers.ModelSerializer):
    role = serializers.SerializerMethodField(help_text="your role in it (staff: admin)")
    held = serializers.SerializerMethodField(help_text="what its running jobs hold now, against max_gpus and max_processes")

    class Meta:
        model = Project
        fields = ["id", "name", "description", "created_at", "role", "priority_ceiling", "max_gpus", "max_processes",
                  "borrow", "held"]

    def get_role(self, project: Project) -> str | None:
        return self.context.get("roles", {}).get(project.pk)

    @extend_schema_field(ProjectHeldOut)
    def get_held(self, project: Project) -> dict[str, int]:
        gpus, processes = self.context.get("held", {}).get(project.pk, (0, 0))
        return {"gpus": gpus, "processes": processes}


@extend_schema_field({"oneOf": [{"type": "string", "enum": ["low", "normal", "high"]},
                                {"type": "integer", "minimum": PRIORITY_MIN, "maximum": PRIORITY_MAX}]})
class PriorityField(serializers.Field):
    """A priority as given: `low` (-10), `normal` (0), `high` (10) or an integer; the integer inside."""

    def to_internal_value(self, data):
        try:
            return parse_priority(data)
        except BadPriority as exc:
            raise serializers.ValidationError(str(exc)) from None

    def to_representation(self, value):
        return value


class ProjectSettingsIn(serializers.Serializer):
    """What `PATCH /api/projects/{name}` changes; every field optional. The project's admins change the
    description and the priority ceiling (up to high); staff also the ceiling above high, the
    quotas and borrowing."""

    description = serializers.CharField(max_length=2000, allow_blank=True, required=False)
    priority_ceiling = PriorityField(required=False, help_text=(
        f"the highest priority its jobs may have; above {ADMIN_CEILING_MAX} (high) only staff set it"))
    max_gpus = serializers.IntegerField(min_value=0, max_value=100_000, allow_null=True, required=False,
                                        help_text="GPUs its running jobs may hold at once; null: no limit (staff)")
    max_processes = serializers.IntegerField(min_value=0, max_value=10_000_000, allow_null=True, required=False,
                                             help_text="processes its running jobs may run at once; null: no limit "
                                                       "(staff)")
    borrow = serializers.BooleanField(required=False, help_text=(
        "past its quota, jobs may start on idle capacity, marked borrowing (staff)"))


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

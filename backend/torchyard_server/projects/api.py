"""Projects and their members: list mine, create (staff), add, re-role and remove members
(the project's admins and staff)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.exceptions import NotFound, PermissionDenied, ValidationError
from rest_framework.response import Response
from rest_framework.views import APIView

from .models import Membership
from .permissions import (
    is_staff,
    project_visible_or_404,
    projects_visible_to,
    require_project_admin,
)
from .priorities import ADMIN_CEILING_MAX, priority_label
from .registries import held_by_project
from .serializers import MembershipIn, MembershipOut, ProjectIn, ProjectOut, ProjectSettingsIn, RoleIn
from .services import ProjectChanges, membership_remove, membership_set, project_create, project_update

# What only staff may change: how much of the cluster a project gets.
STAFF_SETTINGS = ("max_gpus", "max_processes", "borrow")


def _context(user) -> dict:
    return {"roles": _roles(user), "held": held_by_project()}


def _roles(user) -> dict[int, str]:
    if is_staff(user):
        return {pk: str(Membership.Role.ADMIN) for pk in projects_visible_to(user).values_list("pk", flat=True)}
    return dict(Membership.objects.filter(user_id=user.pk).values_list("project_id", "role"))


class ProjectListView(APIView):
    """The projects you belong to, with your role in each (staff: every project)."""

    @extend_schema(responses=ProjectOut(many=True))
    def get(self, request):
        return Response(ProjectOut(projects_visible_to(request.user), many=True, context=_context(request.user)).data)

    @extend_schema(request=ProjectIn, responses={201: ProjectOut})
    def post(self, request):
        if not is_staff(request.user):
            raise PermissionDenied("only staff create projects.")
        data = ProjectIn(data=request.data)
        data.is_valid(raise_exception=True)
        project = project_create(**data.validated_data)
        return Response(ProjectOut(project, context=_context(request.user)).data, status=status.HTTP_201_CREATED)


class ProjectDetailView(APIView):
    @extend_schema(responses=ProjectOut)
    def get(self, request, name: str):
        project = project_visible_or_404(request.user, name)
        return Response(ProjectOut(project, context=_context(request.user)).data)

    @extend_schema(request=ProjectSettingsIn, responses=ProjectOut)
    def patch(self, request, name: str):
        """Change the project's description and priority ceiling (its admins), or its quotas and
        borrowing (staff). Audited."""
        project = project_visible_or_404(request.user, name)
        require_project_admin(request.user, project, to="change its settings")
        data = ProjectSettingsIn(data=request.data)
        data.is_valid(raise_exception=True)
        changes = ProjectChanges(**data.validated_data)
        if not is_staff(request.user):
            refused = [key for key in STAFF_SETTINGS if key in changes]
            if refused:
                raise PermissionDenied(f"only staff set a project's quotas and borrowing ({', '.join(refused)}).")
            ceiling = changes.get("priority_ceiling")
            if ceiling is not None and ceiling > ADMIN_CEILING_MAX:
                raise ValidationError({"priority_ceiling": [
                    f"a project's admins may set it up to {priority_label(ADMIN_CEILING_MAX)}; above that, ask staff."]})
        project = project_update(project=project, changes=changes)
        return Response(ProjectOut(project, context=_context(request.user)).data)


def _user_or_400(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise ValidationError({"username": [f"no user named {username!r}."]})
    return user


class ProjectMembersView(APIView):
    @extend_schema(responses=MembershipOut(many=True))
    def get(self, request, name: str):
        project = project_visible_or_404(request.user, name)
        return Response(MembershipOut(project.memberships.select_related("user").order_by("user__username"), many=True).data)

    @extend_schema(request=MembershipIn, responses={201: MembershipOut, 200: MembershipOut})
    def post(self, request, name: str):
        """Add a user to the project (or change the role of one already in it)."""
        project = project_visible_or_404(request.user, name)
        require_project_admin(request.user, project)
        data = MembershipIn(data=request.data)
        data.is_valid(raise_exception=True)
        membership, created = membership_set(project=project, user=_user_or_400(data.validated_data["username"]),
                                             role=data.validated_data["role"])
        return Response(MembershipOut(membership).data, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK)


class ProjectMemberView(APIView):
    def _membership(self, request, name: str, username: str) -> Membership:
        project = project_visible_or_404(request.user, name)
        require_project_admin(request.user, project)
        membership = project.memberships.select_related("user").filter(user__username=username).first()
        if membership is None:
            raise NotFound(f"{username!r} is not in project {project.name!r}.")
        return membership

    @extend_schema(request=RoleIn, responses=MembershipOut)
    def patch(self, request, name: str, username: str):
        membership = self._membership(request, name, username)
        data = RoleIn(data=request.data)
        data.is_valid(raise_exception=True)
        membership, _ = membership_set(project=membership.project, user=membership.user, role=data.validated_data["role"])
        return Response(MembershipOut(membership).data)

    @extend_schema(responses={204: None})
    def delete(self, request, name: str, username: str):
        membership = self._membership(request, name, username)
        membership_remove(project=membership.project, user=membership.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

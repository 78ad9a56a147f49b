"""Who may see and do what: every view, stream and alias asks here.

- Staff see and do everything (machines, every project, every job).
- Other users see the cluster (machines and their load) and the jobs of the projects they belong to:
  `viewer` reads them, `member` also submits and stops or deletes its own, `admin` stops or deletes
  any job of the project and manages its members.
- An object a user may not see answers 404 (its existence is not disclosed); an action they may not
  take on an object they can see answers 403.

Objects are scoped by a `project` foreign key (a Job) or a path to one (`job__project` for a
checkpoint), so the apps above pass their querysets in and this module never imports them."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from rest_framework.exceptions import NotFound, PermissionDenied
from rest_framework.permissions import SAFE_METHODS, BasePermission

from .models import Membership, Project

Role = Membership.Role
RANK = {Role.VIEWER: 1, Role.MEMBER: 2, Role.ADMIN: 3}
M = TypeVar("M", bound=Model)


def is_staff(user: Any) -> bool:
    return bool(user is not None and user.is_authenticated and user.is_active and user.is_staff)


def role_in(user: Any, project_id: int | None) -> str | None:
    """The user's role in a project (staff count as admin everywhere), or None."""
    if user is None or not user.is_authenticated or project_id is None:
        return None
    if is_staff(user):
        return Role.ADMIN
    return Membership.objects.filter(project_id=project_id, user_id=user.pk).values_list("role", flat=True).first()


def has_role(user: Any, project_id: int | None, least: str) -> bool:
    role = role_in(user, project_id)
    return role is not None and RANK[Role(role)] >= RANK[Role(least)]


def projects_visible_to(user: Any) -> QuerySet[Project]:
    if is_staff(user):
        return Project.objects.all()
    if user is None or not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user_id=user.pk)


def visible_project_ids(user: Any) -> set[int] | None:
    """None means every project (staff)."""
    if is_staff(user):
        return None
    return set(projects_visible_to(user).values_list("pk", flat=True))


def scope_to_user(queryset: QuerySet[M], user: Any, *, via: str = "project") -> QuerySet[M]:
    """Only the rows whose project (reached through `via`) the user may see. A user has at most one
    membership per project, so the join never repeats a row."""
    if is_staff(user):
        return queryset
    if user is None or not user.is_authenticated:
        return queryset.none()
    return queryset.filter(**{f"{via}__memberships__user_id": user.pk})


def visible_or_404(queryset: QuerySet[Any], user: Any, *, via: str = "project", what: str = "object", **lookup: Any) -> Any:
    obj = scope_to_user(queryset, user, via=via).filter(**lookup).first()
    if obj is None:
        raise NotFound(f"no such {what}.")
    return obj


# --- jobs -----------------------------------------------------------------------------------------
def can_control_job(user: Any, job: Any) -> bool:
    """Stop or delete: a project admin (or staff) any job, a member its own."""
    role = role_in(user, job.project_id)
    if role == Role.ADMIN:
        return True
    return role == Role.MEMBER and job.owner_id == user.pk


def require_job_control(user: Any, job: Any) -> None:
    if not can_control_job(user, job):
        raise PermissionDenied("only the job's owner (a member of its project) or an admin of its project may stop or delete it.")


def require_submit(user: Any, project: Project) -> None:
    if not has_role(user, project.pk, Role.MEMBER):
        raise PermissionDenied(
            f"you are not a member of project {project.name!r}: ask one of its admins to add you, "
            "or give another project in the spec's `project` field.")


def submittable_projects(user: Any) -> QuerySet[Project]:
    if is_staff(user):
        return Project.objects.all()
    if user is None or not user.is_authenticated:
        return Project.objects.none()
    return Project.objects.filter(memberships__user_id=user.pk,
                                  memberships__role__in=[Role.MEMBER, Role.ADMIN])


# --- projects -------------------------------------------------------------------------------------
def require_project_admin(user: Any, project: Project, *, to: str = "manage its members") -> None:
    if not has_role(user, project.pk, Role.ADMIN):
        raise PermissionDenied(f"only an admin of project {project.name!r} or staff may {to}.")


def project_visible_or_404(user: Any, name: str) -> Project:
    project = projects_visible_to(user).filter(name=name).first()
    if project is None:
        raise NotFound("no such project.")
    return project


# --- DRF permission classes -----------------------------------------------------------------------
class IsStaff(BasePermission):
    message = "only staff may do this."

    def has_permission(self, request, view) -> bool:
        return is_staff(request.user)


class StaffWritesOthersRead(BasePermission):
    """The cluster: everyone signed in sees it; only staff change it (add, remove, drain machines)."""

    message = "only staff manage machines."

    def has_permission(self, request, view) -> bool:
        user = request.user
        if not (user and user.is_authenticated):
            return False
        return request.method in SAFE_METHODS or is_staff(user)


class CanSubmitSomewhere(BasePermission):
    """Actions that serve job submission (warming caches): a member or admin of some project."""

    message = "you are a member of no project, so you cannot run jobs."

    def has_permission(self, request, view) -> bool:
        user = request.user
        return bool(user and user.is_authenticated) and submittable_projects(user).exists()

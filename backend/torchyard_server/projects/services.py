from __future__ import annotations

from typing import Any, TypedDict

from django.db import transaction

from ..audit import services as audit
from .models import Membership, Project, default_project_pk
from .registries import project_changed


def default_project() -> Project:
    return Project.objects.get(pk=default_project_pk())


def user_joined(sender: Any, instance: Any, created: bool, raw: bool = False, **kwargs: Any) -> None:
    """post_save of a user: a new user joins the default project (staff as its admin), so a single
    user, or a team that never makes a project, never meets projects at all."""
    if created and not raw:
        role = Membership.Role.ADMIN if instance.is_staff else Membership.Role.MEMBER
        Membership.objects.get_or_create(project=default_project(), user=instance, defaults={"role": role})


def project_create(*, name: str, description: str = "", admin: Any = None) -> Project:
    with transaction.atomic():
        project = Project.objects.create(name=name, description=description)
        if admin is not None:
            Membership.objects.create(project=project, user=admin, role=Membership.Role.ADMIN)
        audit.record(None, audit.Action.PROJECT_CREATE, project, admin=admin.get_username() if admin else None)
    return project


class ProjectChanges(TypedDict, total=False):
    """What PATCH /api/projects/{name} (ProjectSettingsIn) and the admin change of a project."""

    description: str
    priority_ceiling: int
    max_gpus: int | None  # None: no limit
    max_processes: int | None
    borrow: bool


def project_update(*, project: Project, changes: ProjectChanges) -> Project:
    """Change a project's description, priority ceiling or quotas (the caller checked who may);
    audited with each changed field's previous value."""
    with transaction.atomic():
        project = Project.objects.select_for_update().get(pk=project.pk)
        changed = {name: value for name, value in changes.items() if getattr(project, name) != value}
        if not changed:
            return project
        previous = {name: getattr(project, name) for name in changed}
        for name, value in changed.items():
            setattr(project, name, value)
        project.save(update_fields=list(changed))
        audit.record(None, audit.Action.PROJECT_UPDATE, project, changes=changed, previous=previous)
        project_changed()
    return project


def membership_set(*, project: Project, user: Any, role: str) -> tuple[Membership, bool]:
    with transaction.atomic():
        previous = Membership.objects.filter(project=project, user=user).values_list("role", flat=True).first()
        membership, created = Membership.objects.update_or_create(project=project, user=user, defaults={"role": role})
        if created:
            audit.record(None, audit.Action.PROJECT_MEMBER_ADD, user, project=project, role=role)
        elif previous != role:
            audit.record(None, audit.Action.PROJECT_MEMBER_ROLE_CHANGE, user, project=project, role=role, previous=previous)
    return membership, created


def membership_remove(*, project: Project, user: Any) -> bool:
    with transaction.atomic():
        deleted, _ = Membership.objects.filter(project=project, user=user).delete()
        if deleted:
            audit.record(None, audit.Action.PROJECT_MEMBER_REMOVE, user, project=project)
    return bool(deleted)

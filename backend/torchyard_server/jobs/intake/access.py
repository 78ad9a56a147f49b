"""Who may submit what a JobSpec names: its project (a member who may submit there), and the
bundles of its code and its function (the submitter's own, or a plugin's of one of their projects).
JobSpecSerializer (spec.py) asks while it validates, so a refusal is keyed by the field it is about."""

from __future__ import annotations

from typing import Any

from rest_framework import serializers

from ...bundles.models import Bundle
from ...bundles.services import bundle_for_user
from ...projects.permissions import projects_visible_to, require_submit
from ...projects.selectors import project_by_name
from ..registries import shared_bundle_for


def check_project(name: str, user: Any) -> None:
    """Unknown, or not one of the submitter's: 400; one they only view: 403 (PermissionDenied)."""
    project = project_by_name(name)
    if project is None or (user is not None and not projects_visible_to(user).filter(pk=project.pk).exists()):
        raise serializers.ValidationError(f"no project named {name!r} that you belong to.")
    if user is not None:
        require_submit(user, project)


def submitters_bundle(sha256: str, user: Any, *, shared: bool = False) -> Bundle | None:
    """The bundle if `user` uploaded it, or with `shared` the code of a plugin of one of their
    projects; None otherwise (and always without a user)."""
    if user is None:
        return None
    return bundle_for_user(sha256=sha256, user=user) or (shared_bundle_for(sha256=sha256, user=user) if shared else None)

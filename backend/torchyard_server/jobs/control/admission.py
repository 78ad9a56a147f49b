"""Admitting a JobSpec: the step between checking its shape (intake/, JobSpecSerializer: no
database, no user) and doing anything with it. What the spec names is checked against the world
and the submitter: the project (one they may submit to), the priority (at most the project's
ceiling), the bundles (their own, or a plugin's of one of their projects; the entrypoint a file of
it, a function's payload holding its pickle); then its secrets are sealed, so what is stored,
planned or logged never holds one in clear. Refusals are SpecRefused (400, keyed by field) or
PermissionDenied (403: a project the user may only view)."""

from __future__ import annotations

from typing import Any

from torchyard.function_results import PAYLOAD_FILE

from ...bundles.models import Bundle
from ...bundles.services import bundle_for_user
from ...projects.models import DEFAULT_PROJECT, Project
from ...projects.permissions import is_staff, projects_visible_to, require_submit
from ...projects.priorities import priority_label
from ...projects.selectors import project_by_name
from ..errors import SpecRefused
from ..registries import shared_bundle_for
from ..spec.secrets import seal_secret_env


def admit_spec(checked: dict[str, Any], *, user: Any, under: str | None = None) -> dict[str, Any]:
    """`checked` (JobSpecSerializer's validated data) once `user` may submit it, with its bundles'
    sizes filled in and its secrets sealed: what JobSpec.from_json reads and a template stores.
    `under`: the field of a request body the spec came in (its refusals are keyed under it)."""
    try:
        return _admitted(checked, user)
    except SpecRefused as exc:
        raise SpecRefused({under: exc.errors} if under else exc.errors) from None


def _admitted(checked: dict[str, Any], user: Any) -> dict[str, Any]:
    project = submittable_project(checked.get("project") or DEFAULT_PROJECT, user)
    check_priority_ceiling(int(checked.get("priority") or 0), project, user)
    admitted = _with_bundles(checked, user)
    if "secret_env" in admitted:
        admitted["secret_env"] = seal_secret_env(admitted["secret_env"])
    return admitted


def submittable_project(name: str, user: Any) -> Project:
    """The project `user` submits to. Unknown, or not one of theirs: 400; one they only view: 403
    (PermissionDenied)."""
    project = project_by_name(name)
    if project is None or (user is not None and not projects_visible_to(user).filter(pk=project.pk).exists()):
        raise SpecRefused({"project": [f"no project named {name!r} that you belong to."]})
    if user is not None:
        require_submit(user, project)
    return project


def check_priority_ceiling(priority: int, project: Project, user: Any) -> None:
    """A priority above the project's ceiling is refused naming it; staff are not capped."""
    if user is None or is_staff(user):
        return
    if priority > project.priority_ceiling:
        raise SpecRefused({"priority": [
            f"priority {priority_label(priority)} is above project {project.name}'s ceiling of "
            f"{priority_label(project.priority_ceiling)}; ask one of its admins to raise it "
            f"(PATCH /api/projects/{project.name})."]})


def submitters_bundle(sha256: str, user: Any, *, shared: bool = False) -> Bundle | None:
    """The bundle if `user` uploaded it, or with `shared` the code of a plugin of one of their
    projects; None otherwise (and always without a user)."""
    if user is None:
        return None
    return bundle_for_user(sha256=sha256, user=user) or (shared_bundle_for(sha256=sha256, user=user) if shared else None)


def _with_bundles(checked: dict[str, Any], user: Any) -> dict[str, Any]:
    """The spec with its code's (and its function's payload's) size, once each is the submitter's."""
    code = checked.get("code")
    if not code:
        return dict(checked)
    if "function" in checked:
        function = checked["function"]
        project = submitters_bundle(code["bundle"], user)
        if project is None:
            raise SpecRefused({"code": {"bundle": ["no such bundle for this user; upload it first."]}})
        payload = submitters_bundle(function["payload"], user)
        if payload is None:
            raise SpecRefused({"function": {"payload": [
                "no such bundle for this user; upload the function's payload first."]}})
        if not payload.has_file(PAYLOAD_FILE):
            raise SpecRefused({"function": {"payload": [f"bundle {function['payload'][:12]} holds no {PAYLOAD_FILE}."]}})
        return {**checked, "code": {"bundle": project.sha256, "size": project.size},
                "function": {**function, "size": payload.size}}
    # Uploaded by this user, or the code of a plugin of one of their projects.
    bundle = submitters_bundle(code["bundle"], user, shared=True)
    if bundle is None:
        raise SpecRefused({"code": {"bundle": [
            "no such bundle for this user; upload it first (PUT /api/bundles/{sha256}, or `torchyard run`)."]}})
    entrypoint = checked.get("entrypoint")
    if entrypoint and not bundle.has_file(entrypoint):
        raise SpecRefused({"entrypoint": [f"{entrypoint!r} is not a file of bundle {bundle}."]})
    return {**checked, "code": {"bundle": bundle.sha256, "size": bundle.size}}

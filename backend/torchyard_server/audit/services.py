"""The one writer of the audit log. Services call `record` where an action happens, inside the
action's transaction: an action that fails or is rolled back leaves no entry.

This app sits below every other (pyproject.toml's import contract), so any of them may record; it
names projects and users through foreign keys only and imports none of their code."""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import models

from .middleware import current_request
from .models import AuditEntry

Action = AuditEntry.Action
SYSTEM = "system"


class Target(NamedTuple):
    """What an action was done to, when it is not a model instance (or should be named otherwise)."""

    type: str
    id: str
    label: str = ""


def record(actor: Any, action: str, target: Any, *, project: Any = None, **detail: Any) -> AuditEntry:
    """Write one entry.

    `actor`: a request (its user and address), a user, a label such as "machine 3", or None for
    whoever made the request being served (`middleware.remember_request`), else "system".
    `target`: a model instance or a `Target`. `project`: a project or its id; by default the
    target's own (a Project, or anything with a `project_id`). `detail`: JSON-serializable facts."""
    if action not in Action.values:
        raise ValueError(f"unknown audit action {action!r}: add it to AuditEntry.Action")
    user, label, ip = _actor(current_request() if actor is None else actor)
    target_type, target_id, target_label = _target(target)
    return AuditEntry.objects.create(
        actor=user, actor_label=label[:150], action=action, target_type=target_type, target_id=target_id[:64],
        target_label=target_label[:200], project_id=_project_id(project, target), detail=detail, source_ip=ip)


def _actor(actor: Any) -> tuple[Any, str, str | None]:
    if actor is None:
        return None, SYSTEM, None
    if isinstance(actor, str):
        return None, actor, None
    if hasattr(actor, "META"):  # an HttpRequest, or DRF's Request around one
        user = getattr(actor, "user", None)
        # The peer's address as daphne saw it; X-Forwarded-For is anyone's to write.
        ip = actor.META.get("REMOTE_ADDR") or None
        if user is not None and user.is_authenticated:
            return user, user.get_username(), ip
        return None, "anonymous", ip
    return actor, actor.get_username(), None


def _target(target: Any) -> tuple[str, str, str]:
    if isinstance(target, Target):
        return target.type, str(target.id), target.label
    if isinstance(target, models.Model):
        label = target.get_username() if hasattr(target, "get_username") else str(target)
        return target._meta.model_name or "", str(target.pk), label
    raise TypeError(f"an audit target is a model instance or a Target, not {type(target).__name__}")


def _project_id(project: Any, target: Any) -> int | None:
    if project is not None:
        return project if isinstance(project, int) else project.pk
    if isinstance(target, models.Model) and target._meta.label == "projects.Project":
        return target.pk
    return getattr(target, "project_id", None)

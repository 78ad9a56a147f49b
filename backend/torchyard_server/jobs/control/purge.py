"""Purging finished jobs (the Rust coordinator's `POST /jobs/purge`): every job of a project that ended more than
an age ago goes, with what hangs off it in the database (nodes, events, checkpoint and artifact
records) and its files in the store (`job-<id>/`: checkpoints and artifacts).

Staff may purge any project; a project's admin, that project's jobs. A job's files are deleted
before its rows, and a job whose files could not all be deleted keeps its rows (and says why), so a
purge that fails half-way never leaves rows pointing at nothing or files nobody can find again.

The rows that go with a job (in apps above this one) are counted by the view, a report
(reports/purge_api.py, reports/job_rows.py)."""

from __future__ import annotations

import contextlib
import datetime as dt
import os
from dataclasses import dataclass, field
from typing import Any

from django.core.files.storage import FileSystemStorage, Storage
from django.db.models import QuerySet
from django.db.models.functions import Coalesce
from rest_framework.exceptions import PermissionDenied

from ...core.stores import storage_at, store_url
from ...projects.models import Membership, Project
from ...projects.permissions import is_staff
from ..models import Job
from ..states import JOB_FINAL, NODE_LIVE
from .stop import job_delete


@dataclass
class PurgedJob:
    job: Job
    job_id: int  # the job's pk is None once it is deleted
    stored_files: int = 0
    stored_bytes: int = 0
    error: str | None = None
    deleted: bool = False


@dataclass
class StoreWalk:
    files: list[str] = field(default_factory=list)
    folders: list[str] = field(default_factory=list)
    bytes: int = 0


def purgeable_projects(user: Any, project: Project | None) -> QuerySet[Project] | None:
    """The projects this user may purge in (None: every project, for staff); 403 otherwise."""
    if is_staff(user):
        return None if project is None else Project.objects.filter(pk=project.pk)
    admin_of = Project.objects.filter(memberships__user_id=user.pk, memberships__role=Membership.Role.ADMIN)
    if project is not None:
        admin_of = admin_of.filter(pk=project.pk)
        if not admin_of.exists():
            raise PermissionDenied(f"only an admin of project {project.name!r} or staff may purge its jobs.")
    elif not admin_of.exists():
        raise PermissionDenied("only staff or a project's admin may purge jobs.")
    return admin_of


def purge_candidates(*, projects: QuerySet[Project] | None, cutoff: dt.datetime,
                     statuses: list[str] | None = None) -> QuerySet[Job]:
    """Finished jobs that ended before `cutoff` (one that never started counts from its creation),
    oldest first."""
    qs = (Job.objects.select_related("project", "owner")
          .filter(status__in=[s for s in (statuses or JOB_FINAL) if s in JOB_FINAL])
          .annotate(ended=Coalesce("finished_at", "created_at")).filter(ended__lt=cutoff)
          # A failed job's other nodes may still be stopping: their files are not all in yet.
          .exclude(nodes__status__in=NODE_LIVE)
          .order_by("ended", "id"))
    return qs if projects is None else qs.filter(project__in=projects)


def _walk(storage: Storage, folder: str = "") -> StoreWalk:
    """Every file under `folder` of the store (with its size) and every folder, deepest first."""
    walk = StoreWalk()
    try:
        folders, files = storage.listdir(folder)
    except FileNotFoundError:
        return walk
    for name in files:
        path = f"{folder}/{name}" if folder else name
        walk.files.append(path)
        walk.bytes += storage.size(path)
    for name in folders:
        sub = _walk(storage, f"{folder}/{name}" if folder else name)
        walk.files += sub.files
        walk.folders += sub.folders
        walk.bytes += sub.bytes
    if folder:
        walk.folders.append(folder)
    return walk


def _delete_stored(storage: Storage, walk: StoreWalk) -> None:
    for path in walk.files:
        storage.delete(path)
    # A local store keeps empty folders (S3 has none: the listing came from the keys).
    if isinstance(storage, FileSystemStorage):
        for folder in walk.folders:
            storage.delete(folder)
        with contextlib.suppress(OSError):
            os.rmdir(storage.location)


def jobs_purge(*, jobs: list[Job], dry_run: bool) -> list[PurgedJob]:
    """Delete each job's files, then the job with its rows; with dry_run, only count them."""
    purged = []
    for job in jobs:
        result = PurgedJob(job=job, job_id=job.pk)
        purged.append(result)
        try:
            storage = storage_at(store_url(f"job-{job.pk}"))
            walk = _walk(storage)
            result.stored_files, result.stored_bytes = len(walk.files), walk.bytes
            if not dry_run:
                _delete_stored(storage, walk)
        except Exception as exc:  # the store is another system: report it, keep the job's rows
            result.error = f"its files could not be deleted from the store: {exc}"
            continue
        if not dry_run:
            job_delete(job=job)
            result.deleted = True
    return purged

"""Reading a job's stored files (committed checkpoints, artifacts) back for download from the API.

Only URIs under the job's own folder (TORCHYARD_STORAGE_URL/job-<id>/) are ever opened: a URI
arrives in an event a training script can influence, and must not become a way to read arbitrary
files of the server."""

from __future__ import annotations

import posixpath

from django.core.files.storage import Storage

from ..core.stores import split_url, storage_at, store_url


class OutsideJobStore(ValueError):
    pass


def job_root(job_id: int) -> str:
    return store_url(f"job-{job_id}") + "/"


def storage_for(uri: str, job_id: int) -> tuple[Storage, str]:
    """(storage rooted at the job's folder, key of `uri` inside it)."""
    root = job_root(job_id)
    scheme, netloc, path = split_url(uri)
    root_scheme, root_netloc, root_path = split_url(root)
    normalized = posixpath.normpath(path)
    if (scheme, netloc) != (root_scheme, root_netloc) or not (normalized + "/").startswith(root_path):
        raise OutsideJobStore(f"{uri} is not inside {root}")
    try:
        return storage_at(root), normalized[len(root_path):]
    except ValueError as exc:
        raise OutsideJobStore(str(exc)) from None

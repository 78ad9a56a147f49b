"""Reading committed checkpoints back through django-storages, for download from the API.

Only URIs under the job's own checkpoint folder (TORCHYARD_STORAGE_URL/job-<id>/) are ever opened:
a manifest URI arrives in an event a training script can influence, and must not become a way to
read arbitrary files of the server."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlparse

from django.conf import settings
from django.core.files.storage import FileSystemStorage, Storage


class OutsideJobStore(ValueError):
    pass


def job_root(job_id: int) -> str:
    return f"{settings.STORAGE_URL.rstrip('/')}/job-{job_id}/"


def _split(uri: str) -> tuple[str, str, str]:
    parsed = urlparse(uri)
    path = unquote(parsed.path)
    return parsed.scheme, parsed.netloc, path


def storage_for(uri: str, job_id: int) -> tuple[Storage, str]:
    """(storage rooted at the job's folder, key of `uri` inside it)."""
    root = job_root(job_id)
    scheme, netloc, path = _split(uri)
    root_scheme, root_netloc, root_path = _split(root)
    normalized = posixpath.normpath(path)
    if (scheme, netloc) != (root_scheme, root_netloc) or not (normalized + "/").startswith(root_path):
        raise OutsideJobStore(f"{uri} is not inside {root}")
    key = normalized[len(root_path):]
    if scheme == "file":
        return FileSystemStorage(location=root_path), key
    if scheme == "s3":
        from storages.backends.s3 import S3Storage

        return S3Storage(
            bucket_name=netloc,
            location=root_path.strip("/"),
            endpoint_url=settings.S3_ENDPOINT_URL or None,
            addressing_style="path",
            signature_version="s3v4",
            querystring_auth=False,
            file_overwrite=False,
        ), key
    raise OutsideJobStore(f"unsupported checkpoint store {scheme!r}")

"""The one store every durable file goes to (TORCHYARD_STORAGE_URL: a directory or s3://bucket/prefix),
opened through django-storages. Checkpoints and artifacts live under `job-<id>/`, code bundles under
`bundles/`."""

from __future__ import annotations

import posixpath
from urllib.parse import unquote, urlparse

from django.conf import settings
from django.core.files.storage import FileSystemStorage, Storage


def store_url(*parts: str) -> str:
    """The URL of a folder or file under the store's root."""
    return "/".join([settings.STORAGE_URL.rstrip("/"), *parts])


def split_url(uri: str) -> tuple[str, str, str]:
    """(scheme, bucket or host, unquoted path)."""
    parsed = urlparse(uri)
    return parsed.scheme, parsed.netloc, unquote(parsed.path)


def storage_at(url: str) -> Storage:
    """A django-storages Storage rooted at `url` (file:///dir or s3://bucket/prefix)."""
    scheme, netloc, path = split_url(url)
    if scheme == "file":
        return FileSystemStorage(location=path)
    if scheme == "s3":
        from storages.backends.s3 import S3Storage

        return S3Storage(
            bucket_name=netloc,
            location=posixpath.normpath(path).strip("/") if path.strip("/") else "",
            endpoint_url=settings.S3_ENDPOINT_URL or None,
            access_key=settings.S3_ACCESS_KEY or None,
            secret_key=settings.S3_SECRET_KEY or None,
            addressing_style="path",
            signature_version="s3v4",
            querystring_auth=False,
            # Content-addressed or per-attempt names: the same name means the same bytes.
            file_overwrite=True,
        )
    raise ValueError(f"unsupported store {scheme!r}")

"""Storing uploaded code bundles: spooled, hashed, checked member by member, then kept in the store
under their sha256. Nothing of a refused upload is kept."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage
from django.db import transaction
from torchyard.bundles import BundleError, inspect_archive, size_text

from ..audit import services as audit
from ..core.stores import storage_at, store_url
from .models import Bundle

CHUNK = 1 << 20


def bundles_url() -> str:
    return store_url("bundles")


def bundle_storage() -> Storage:
    return storage_at(bundles_url())


def bundle_uri(bundle: Bundle) -> str:
    return f"{bundles_url()}/{bundle.storage_name}"


def bundle_for_user(*, sha256: str, user) -> Bundle | None:
    """The bundle if this user uploaded it (staff may run anyone's)."""
    bundles = Bundle.objects.filter(sha256=sha256)
    if not user.is_staff:
        bundles = bundles.filter(owners=user)
    return bundles.first()


def _spool(stream: IO[bytes], directory: str | None, limit: int) -> tuple[Path, str, int]:
    """Copy the request body to a temporary file, hashing it; BundleError past `limit` bytes."""
    digest, size = hashlib.sha256(), 0
    fd, name = tempfile.mkstemp(prefix=".upload-", suffix=".tar.zst", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(CHUNK):
                size += len(chunk)
                if size > limit:
                    raise BundleError(f"the archive is larger than the limit of {size_text(limit)}")
                digest.update(chunk)
                out.write(chunk)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name), digest.hexdigest(), size


def bundle_store(*, sha256: str, stream: IO[bytes], owner) -> tuple[Bundle, bool]:
    """Check and keep an upload claimed to hash to `sha256`; (bundle, created). Raises BundleError."""
    storage = bundle_storage()
    local_dir = None
    if isinstance(storage, FileSystemStorage):
        # Spool beside the final place so keeping it is a rename, not a second copy.
        local_dir = storage.location
        os.makedirs(local_dir, exist_ok=True)
    path, digest, size = _spool(stream, local_dir, settings.BUNDLE_MAX_BYTES)
    try:
        if digest != sha256:
            raise BundleError(f"the upload hashes to {digest}, not to the {sha256} it was sent as")
        with open(path, "rb") as handle:
            info = inspect_archive(handle, max_unpacked_bytes=settings.BUNDLE_MAX_BYTES)
        name = f"{sha256}.tar.zst"
        if not storage.exists(name):
            if local_dir is not None:
                os.replace(path, Path(local_dir) / name)
            else:
                with open(path, "rb") as handle:
                    storage.save(name, File(handle))
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
    files = info.files + [{"path": p, "link": target} for p, target in sorted(info.symlinks.items())]
    with transaction.atomic():
        bundle, created = Bundle.objects.get_or_create(
            sha256=sha256, defaults={"size": size, "unpacked_size": info.unpacked_size, "files": files}
        )
        bundle.owners.add(owner)
        # Named by its sha256, the name users and specs know it by; uploading it again is recorded
        # too, since it is what lets another user run those bytes.
        audit.record(None, audit.Action.BUNDLE_UPLOAD, audit.Target("bundle", bundle.sha256, str(bundle)),
                     size=bundle.size, files=len(bundle.files), new=created)
    return bundle, created

"""Storing uploaded code bundles: spooled, hashed and checked member by member in one pass, then kept
in the store under their sha256. Nothing of a refused upload is kept."""

from __future__ import annotations

import contextlib
import hashlib
import os
import tempfile
import threading
from pathlib import Path
from typing import IO

from django.conf import settings
from django.core.files import File
from django.core.files.storage import FileSystemStorage, Storage
from django.db import transaction
from torchyard.bundles import (
    MAX_RATIO,
    PAYLOAD_RATIO,
    BundleError,
    BundleInfo,
    BundleReadError,
    inspect_archive,
    size_text,
)
from torchyard.function_results import META_FILE, PAYLOAD_FILE

from ..audit import services as audit
from ..core.stores import storage_at, store_url
from .models import Bundle

CHUNK = 1 << 20
# What an upload is: a project's code, or a function's payload (its pickled call).
KINDS = ("code", "function")
PAYLOAD_FILES = (PAYLOAD_FILE, META_FILE)


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


class _Spooling:
    """The request body as inspect_archive reads it: every byte hashed, counted against the limit and
    written to the spool file on its way past, so an upload is read once, not spooled then re-read."""

    def __init__(self, stream: IO[bytes], out: IO[bytes], limit: int) -> None:
        self.stream = stream
        self.out = out
        self.limit = limit
        self.digest = hashlib.sha256()
        self.size = 0
        # The archive reader's thread reads, then this one drains: a read it left in flight when it
        # stopped must not interleave with the drain's.
        self.reading = threading.Lock()

    def read(self, size: int = -1) -> bytes:
        with self.reading:
            data = self.stream.read(size if size > 0 else CHUNK)
            if data:
                self.size += len(data)
                if self.size > self.limit:
                    raise BundleError(f"the archive is larger than the limit of {size_text(self.limit)}")
                self.digest.update(data)
                self.out.write(data)
            return data

    def drain(self) -> str:
        """Read what the archive reader left (nothing, once it read a whole archive); the sha256."""
        while self.read(CHUNK):
            pass
        return self.digest.hexdigest()


def _spool_and_inspect(stream: IO[bytes], sha256: str, directory: str | None,
                       max_ratio: float | None) -> tuple[Path, BundleInfo, int]:
    """Copy the request body to a temporary file while it is hashed and checked member by member, in
    one pass; BundleError (the hash's before the members': a body that is not the one named is
    refused as such) and nothing left of the file unless the upload is sound."""
    fd, name = tempfile.mkstemp(prefix=".upload-", suffix=".tar.zst", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            spool = _Spooling(stream, out, settings.BUNDLE_MAX_BYTES)
            try:
                info = inspect_archive(spool, max_unpacked_bytes=settings.BUNDLE_MAX_BYTES, max_ratio=max_ratio)
            except BundleReadError as exc:
                if isinstance(exc.__cause__, BundleError):  # the limit, raised while the reader read
                    raise exc.__cause__ from None
                raise
            except BundleError:
                if spool.drain() != sha256:
                    raise _mismatch(spool.digest.hexdigest(), sha256) from None
                raise
            if (digest := spool.drain()) != sha256:
                raise _mismatch(digest, sha256)
    except BaseException:
        os.unlink(name)
        raise
    return Path(name), info, spool.size


def _mismatch(digest: str, sha256: str) -> BundleError:
    return BundleError(f"the upload hashes to {digest}, not to the {sha256} it was sent as")


def bundle_store(*, sha256: str, stream: IO[bytes], owner, kind: str = "code") -> tuple[Bundle, bool]:
    """Check and keep an upload claimed to hash to `sha256`; (bundle, created). Raises BundleError.
    A `function` bundle (a function's payload) is judged by its unpacked size alone and must hold
    the payload's two files and nothing else."""
    storage = bundle_storage()
    local_dir = None
    if isinstance(storage, FileSystemStorage):
        # Spool beside the final place so keeping it is a rename, not a second copy.
        local_dir = storage.location
        os.makedirs(local_dir, exist_ok=True)
    path, info, size = _spool_and_inspect(stream, sha256, local_dir,
                                          PAYLOAD_RATIO if kind == "function" else MAX_RATIO)
    if kind == "function" and (sorted(f["path"] for f in info.files) != sorted(PAYLOAD_FILES)
                               or info.symlinks or info.directories):
        path.unlink()
        raise BundleError(f"a function's payload holds {' and '.join(PAYLOAD_FILES)} only")
    try:
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

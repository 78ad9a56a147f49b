"""Where checkpoint files live: a local directory or an S3 prefix, behind one small interface.

Layout under the root (the same on both)::

    <root>/step-00000200/state.pt           (sharded: DCP's __0_0.distcp, __1_0.distcp, ..., .metadata)
    <root>/step-00000200/manifest.json      written last: the commit marker
    <root>/LATEST                           text: the name of the newest committed step directory

A step directory without manifest.json is an unfinished save and is ignored by readers.

On a local directory a save's files and its manifest are written into ``.tmp-step-*`` and made
durable together (each file fsynced, then the directory once), and the directory is renamed into
place (then the root fsynced): the step directory appears whole, manifest included. LATEST is a
hint (readers check it and fall back on the newest manifest), replaced atomically but not fsynced.
Four fsyncs a save of one file, where a manifest written after the rename took eight: on a small
state (the Rust coordinator's demo worker) they were most of the save.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import BinaryIO, cast
from urllib.parse import unquote, urlparse

from torchyard.sdk.checkpoint.hashing import HashingWriter, hash_file
from torchyard.storage import s3_client
from torchyard.stream_contract import Manifest, ManifestFile

MANIFEST = "manifest.json"
LATEST = "LATEST"
STEP_DIR_RE = re.compile(r"step-(\d{8,})")
STAGING_PREFIX = ".tmp-"


def step_dir_name(step: int) -> str:
    return f"step-{step:08d}"


def step_of(step_dir: str) -> int:
    match = STEP_DIR_RE.fullmatch(step_dir)
    if not match:
        raise ValueError(f"not a checkpoint step directory: {step_dir!r}")
    return int(match.group(1))


@dataclass
class FileEntry:
    path: str
    size: int
    sha256: str

    def to_dict(self) -> ManifestFile:
        return {"path": self.path, "size": self.size, "sha256": self.sha256}


@dataclass
class LocalCopy:
    """A checkpoint file readable at ``path``; ``cleanup()`` removes it when it is a temporary copy."""

    path: str
    cleanup: Callable[[], None]


class Store:
    """The operations a checkpoint save and load need; see LocalStore and S3Store."""

    url: str

    def prepare(self, step_dir: str) -> None:
        """Make room for a new save of ``step_dir`` (rank 0, before any rank writes)."""
        raise NotImplementedError

    def write_file(self, step_dir: str, name: str, produce: Callable[[BinaryIO], None]) -> FileEntry:
        """Stage one data file: ``produce`` writes it; it is durable and hashed when this returns."""
        raise NotImplementedError

    def add_file(self, step_dir: str, name: str, path: str, digest: tuple[int, str] | None = None) -> FileEntry:
        """Stage a file already written at ``path`` (by torch.distributed.checkpoint), whose
        (size, sha256) is ``digest`` when known."""

        def copy(fh: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, fh, 8 << 20)

        return self.write_file(step_dir, name, copy)

    def local_staging_dir(self, step_dir: str) -> str | None:
        """Where ranks may write the files of ``step_dir`` directly, when the store is a directory."""
        return None

    def local_dir(self, step_dir: str) -> str | None:
        """The directory holding a committed ``step_dir``, when the store is a directory."""
        return None

    def discard(self, step_dir: str) -> None:
        """Forget an unfinished save of ``step_dir``."""
        raise NotImplementedError

    def commit(self, step_dir: str, manifest: Manifest) -> None:
        """Publish the staged files of ``step_dir`` by writing its manifest, atomically, last."""
        raise NotImplementedError

    def write_latest(self, step_dir: str) -> None:
        raise NotImplementedError

    def read_latest(self) -> str | None:
        raise NotImplementedError

    def read_manifest(self, step_dir: str) -> Manifest | None:
        raise NotImplementedError

    def step_dirs(self) -> dict[str, bool]:
        """Every step directory under the root, mapped to whether it is committed."""
        raise NotImplementedError

    def delete(self, step_dir: str) -> None:
        """Remove a checkpoint: its manifest first, so a half-deleted one is never taken as good."""
        raise NotImplementedError

    def fetch(self, step_dir: str, name: str) -> LocalCopy:
        """A local copy of one file (the file itself for a local store)."""
        raise NotImplementedError

    def fetch_to(self, step_dir: str, name: str, dest: str) -> None:
        """Copy one file of a committed ``step_dir`` to the local path ``dest``."""
        raise NotImplementedError

    def manifest_uri(self, step_dir: str) -> str:
        raise NotImplementedError

    def committed(self) -> list[str]:
        """Committed step directories, newest first."""
        return sorted((d for d, ok in self.step_dirs().items() if ok), key=step_of, reverse=True)


def _encode_manifest(manifest: Manifest) -> bytes:
    return json.dumps(manifest, indent=2, sort_keys=True).encode()


def _decode_manifest(raw: bytes) -> Manifest | None:
    """A manifest as some SDK wrote it (an older one may lack fields): its readers check what they use."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return cast("Manifest", data) if isinstance(data, dict) else None


# --- local directory ------------------------------------------------------------------------------
def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _replace(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` at once (readers see the old or the new, whole); not fsynced."""
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as fh:
        fh.write(data)
    os.replace(tmp, path)


class LocalStore(Store):
    """Checkpoints in a directory; staging happens in ``.tmp-step-*`` next to the real ones."""

    def __init__(self, root: str) -> None:
        self.root = os.path.abspath(root)
        self.url = "file://" + self.root

    def _final(self, step_dir: str) -> str:
        return os.path.join(self.root, step_dir)

    def _staging(self, step_dir: str) -> str:
        return os.path.join(self.root, STAGING_PREFIX + step_dir)

    def prepare(self, step_dir: str) -> None:
        os.makedirs(self.root, exist_ok=True)
        staging = self._staging(step_dir)
        shutil.rmtree(staging, ignore_errors=True)
        os.mkdir(staging)  # made durable with what it holds, at the commit

    def write_file(self, step_dir: str, name: str, produce: Callable[[BinaryIO], None]) -> FileEntry:
        staging = self._staging(step_dir)
        path = os.path.join(staging, name)
        with open(path, "wb") as fh:
            writer = HashingWriter(fh, writeback_fd=fh.fileno())
            produce(writer)  # type: ignore[arg-type]
            fh.flush()
            os.fsync(fh.fileno())
        # Its directory entry is made durable with the others' at the commit (one fsync of staging).
        return FileEntry(name, writer.size, writer.hexdigest())

    def add_file(self, step_dir: str, name: str, path: str, digest: tuple[int, str] | None = None) -> FileEntry:
        staging = self._staging(step_dir)
        if os.path.dirname(os.path.abspath(path)) != staging:
            return super().add_file(step_dir, name, path, digest)
        # Written in place (and fsynced) by its rank: only its hash and directory entry remain.
        size, sha256 = digest or hash_file(path)
        _fsync_dir(staging)
        return FileEntry(name, size, sha256)

    def local_staging_dir(self, step_dir: str) -> str | None:
        return self._staging(step_dir)

    def local_dir(self, step_dir: str) -> str | None:
        return self._final(step_dir)

    def discard(self, step_dir: str) -> None:
        shutil.rmtree(self._staging(step_dir), ignore_errors=True)

    def commit(self, step_dir: str, manifest: Manifest) -> None:
        staging = self._staging(step_dir)
        for entry in manifest["files"]:
            # Ranks on other machines write into their own copy of this path unless it is shared.
            path = os.path.join(staging, entry["path"])
            if not os.path.isfile(path) or os.path.getsize(path) != entry["size"]:
                raise RuntimeError(
                    f"{entry['path']} is not in {staging} as its rank wrote it: a filesystem checkpoint "
                    "store for a multi-machine job must be on a shared filesystem (or use an s3:// store)"
                )
        with open(os.path.join(staging, MANIFEST), "wb") as fh:
            fh.write(_encode_manifest(manifest))
            fh.flush()
            os.fsync(fh.fileno())
        _fsync_dir(staging)  # every file's entry and the manifest's, durable before the step dir appears
        final = self._final(step_dir)
        if os.path.exists(final):
            # Left by a save of an earlier run that died (a committed one is never re-saved).
            shutil.rmtree(final)
        os.rename(staging, final)
        _fsync_dir(self.root)

    def write_latest(self, step_dir: str) -> None:
        _replace(os.path.join(self.root, LATEST), (step_dir + "\n").encode())

    def read_latest(self) -> str | None:
        try:
            with open(os.path.join(self.root, LATEST), encoding="utf-8") as fh:
                name = fh.read().strip()
        except OSError:
            return None
        return name if STEP_DIR_RE.fullmatch(name) else None

    def read_manifest(self, step_dir: str) -> Manifest | None:
        try:
            with open(os.path.join(self._final(step_dir), MANIFEST), "rb") as fh:
                return _decode_manifest(fh.read())
        except OSError:
            return None

    def step_dirs(self) -> dict[str, bool]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return {}
        found = {}
        for name in names:
            bare = name.removeprefix(STAGING_PREFIX)
            if STEP_DIR_RE.fullmatch(bare):
                committed = name == bare and os.path.isfile(os.path.join(self.root, name, MANIFEST))
                found[name] = committed
        return found

    def delete(self, step_dir: str) -> None:
        path = os.path.join(self.root, step_dir)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(path, MANIFEST))
            _fsync_dir(path)
        shutil.rmtree(path, ignore_errors=True)

    def fetch(self, step_dir: str, name: str) -> LocalCopy:
        path = os.path.join(self._final(step_dir), name)
        if not os.path.isfile(path):
            raise FileNotFoundError(path)
        return LocalCopy(path, lambda: None)

    def fetch_to(self, step_dir: str, name: str, dest: str) -> None:
        shutil.copyfile(os.path.join(self._final(step_dir), name), dest)

    def manifest_uri(self, step_dir: str) -> str:
        return f"{self.url}/{step_dir}/{MANIFEST}"


# --- S3 -------------------------------------------------------------------------------------------
class S3Store(Store):
    """Checkpoints under ``s3://bucket/prefix``. Data objects go straight to the step prefix; the
    manifest object, put last, is the commit marker (S3 has no rename)."""

    def __init__(self, bucket: str, prefix: str) -> None:
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self.url = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"
        self._client = None

    @property
    def client(self):
        if self._client is None:
            self._client = s3_client()
        return self._client

    def _key(self, *parts: str) -> str:
        return "/".join(p for p in (self.prefix, *parts) if p)

    def _transfer_config(self):
        from boto3.s3.transfer import TransferConfig

        return TransferConfig(multipart_threshold=16 << 20, multipart_chunksize=16 << 20, max_concurrency=8)

    def _keys_under(self, prefix: str) -> Iterator[str]:
        paginator = self.client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=self.bucket, Prefix=prefix):
            for item in page.get("Contents", []):
                yield item["Key"]

    def _delete_keys(self, keys: list[str]) -> None:
        for start in range(0, len(keys), 1000):
            batch = [{"Key": k} for k in keys[start : start + 1000]]
            if batch:
                self.client.delete_objects(Bucket=self.bucket, Delete={"Objects": batch, "Quiet": True})

    def prepare(self, step_dir: str) -> None:
        # Objects left by an earlier, unfinished save of the same step must not mix with ours.
        self.discard(step_dir)

    def write_file(self, step_dir: str, name: str, produce: Callable[[BinaryIO], None]) -> FileEntry:
        # torch.save writes into a pipe on a helper thread while boto3 reads the other end and
        # uploads parts in parallel: serializing, hashing and uploading overlap, and nothing is
        # spooled to local disk. Memory stays bounded by boto3's in-flight parts.
        read_fd, write_fd = os.pipe()
        with contextlib.suppress(OSError, AttributeError):
            fcntl.fcntl(write_fd, fcntl.F_SETPIPE_SZ, 1 << 20)  # fewer wake-ups than the 64 KB default
        reader = os.fdopen(read_fd, "rb")  # buffered: read(n) returns whole parts
        writer = os.fdopen(write_fd, "wb")
        hashing = HashingWriter(writer)
        failure: list[BaseException] = []

        def serialize() -> None:
            try:
                produce(hashing)  # type: ignore[arg-type]
                writer.flush()
            except BaseException as exc:  # noqa: BLE001 - re-raised on the calling thread
                failure.append(exc)
            finally:
                with contextlib.suppress(OSError):
                    writer.close()  # EOF for the uploader, even after a failure

        thread = threading.Thread(target=serialize, name="torchyard-serialize", daemon=True)
        thread.start()
        try:
            self.client.upload_fileobj(
                reader, self.bucket, self._key(step_dir, name), Config=self._transfer_config()
            )
        finally:
            reader.close()  # a failed upload must not leave the serializer blocked on a full pipe
            thread.join()
        if failure:
            # The object may hold a truncated file; without a manifest nobody reads it.
            raise failure[0]
        return FileEntry(name, hashing.size, hashing.hexdigest())

    def discard(self, step_dir: str) -> None:
        self._delete_keys(list(self._keys_under(self._key(step_dir) + "/")))

    def commit(self, step_dir: str, manifest: Manifest) -> None:
        self.client.put_object(
            Bucket=self.bucket,
            Key=self._key(step_dir, MANIFEST),
            Body=_encode_manifest(manifest),
            ContentType="application/json",
        )

    def write_latest(self, step_dir: str) -> None:
        self.client.put_object(Bucket=self.bucket, Key=self._key(LATEST), Body=(step_dir + "\n").encode())

    def _get(self, key: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def read_latest(self) -> str | None:
        raw = self._get(self._key(LATEST))
        name = raw.decode(errors="replace").strip() if raw else ""
        return name if STEP_DIR_RE.fullmatch(name) else None

    def read_manifest(self, step_dir: str) -> Manifest | None:
        raw = self._get(self._key(step_dir, MANIFEST))
        return None if raw is None else _decode_manifest(raw)

    def step_dirs(self) -> dict[str, bool]:
        base = self._key() + "/" if self.prefix else ""
        found: dict[str, bool] = {}
        for key in self._keys_under(base):
            head, _, rest = key[len(base) :].partition("/")
            if STEP_DIR_RE.fullmatch(head):
                found[head] = found.get(head, False) or rest == MANIFEST
        return found

    def delete(self, step_dir: str) -> None:
        self.client.delete_object(Bucket=self.bucket, Key=self._key(step_dir, MANIFEST))
        self.discard(step_dir)

    def fetch(self, step_dir: str, name: str) -> LocalCopy:
        fd, path = tempfile.mkstemp(prefix="torchyard-ckpt-", suffix=".pt")
        os.close(fd)
        try:
            self.fetch_to(step_dir, name, path)
        except BaseException:
            os.unlink(path)
            raise
        return LocalCopy(path, lambda: os.unlink(path))

    def fetch_to(self, step_dir: str, name: str, dest: str) -> None:
        # A seekable target lets boto3 write the parts in parallel; hashing follows from disk.
        self.client.download_file(self.bucket, self._key(step_dir, name), dest, Config=self._transfer_config())

    def manifest_uri(self, step_dir: str) -> str:
        return f"{self.url}/{step_dir}/{MANIFEST}"


# --- URLs -----------------------------------------------------------------------------------------
def open_store(url: str) -> Store:
    """The store for ``file:///abs/dir``, a plain path, or ``s3://bucket/prefix``."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise ValueError(f"checkpoint URL {url!r} names no bucket")
        return S3Store(parsed.netloc, parsed.path)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost"):
            raise ValueError(f"checkpoint URL {url!r}: file URLs must be file:///absolute/path")
        return LocalStore(unquote(parsed.path))
    if parsed.scheme and len(parsed.scheme) > 1:
        raise ValueError(f"unsupported checkpoint URL scheme {parsed.scheme!r} in {url!r}")
    return LocalStore(url)


def split_manifest_uri(uri: str) -> tuple[str, str]:
    """(root URL, step directory) of a manifest URI (or of a step directory URI)."""
    trimmed = uri.rstrip("/")
    if trimmed.endswith("/" + MANIFEST):
        trimmed = trimmed[: -len(MANIFEST) - 1]
    root, _, step_dir = trimmed.rpartition("/")
    if not STEP_DIR_RE.fullmatch(step_dir):
        raise ValueError(f"{uri!r} does not name a checkpoint manifest (…/step-NNNNNNNN/{MANIFEST})")
    return root, step_dir

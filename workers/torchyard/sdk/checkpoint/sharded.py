"""Sharded checkpoints through torch.distributed.checkpoint (DCP), under the manifest commit.

DCP plans which rank writes which bytes (a DTensor/FSDP shard is written by the rank that holds it,
replicated tensors once) and can load into a different world size or sharding than the one that
saved. What DCP lacks, Torchyard adds around it:

- Save: every rank writes its ``__<rank>_<n>.distcp`` files (rank 0 also DCP's ``.metadata``) into a
  local directory: the store's staging directory when the store is a filesystem path, else a
  private temporary directory whose files are then uploaded. Each rank hashes what it writes as
  it writes it; the caller gathers the entries and rank 0 commits the manifest exactly as for replicated state.
- Load: a reader that checks each file against the manifest's size and sha256 before DCP opens it,
  fetching it first from object storage. Only the files this rank's load plan needs are fetched
  and checked; ``.metadata`` (a pickle) is never read unchecked.

Imported only when a sharded checkpoint is saved or loaded (it imports torch.distributed.checkpoint).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from torchyard.sdk.checkpoint.hashing import HashedFile, hash_file, skip_torch_crc32
from torchyard.sdk.checkpoint.stores import FileEntry, Store

METADATA_FILE = ".metadata"


class CheckpointFileError(RuntimeError):
    """A file of a checkpoint is missing, unreadable, or fails its size or sha256 check."""


def prepare_directory(store: Store, step_dir: str) -> tuple[str, bool]:
    """(directory this rank writes into, whether it is a private temporary one to remove after).

    Raises when rank 0's staging directory is not visible here: a filesystem store shared by
    several machines must be on a shared filesystem.
    """
    staging = store.local_staging_dir(step_dir)
    if staging is None:
        return tempfile.mkdtemp(prefix="torchyard-dcp-save-"), True
    if not os.path.isdir(staging):
        raise RuntimeError(
            f"the staging directory {staging} that rank 0 created is not visible on this machine: "
            "a filesystem checkpoint store for a multi-machine job must be on a shared filesystem "
            "(or use an s3:// store)"
        )
    return staging, False


def write(store: Store, step_dir: str, directory: str, state: Any) -> list[FileEntry]:
    """Save ``state`` with DCP into ``directory`` (collective: every rank calls it), then hash or
    upload this rank's files. Returns their manifest entries."""
    writer = RecordingWriter(directory)
    try:
        with _single_process_is_fine(), skip_torch_crc32():
            dcp.save(state, storage_writer=writer, no_dist=not dist.is_initialized())
    except CheckpointException as exc:  # a BaseException: turn it into an ordinary failure
        raise RuntimeError(describe(exc)) from None
    names = list(writer.written) + ([METADATA_FILE] if writer.is_coordinator else [])
    return [
        store.add_file(step_dir, name, os.path.join(directory, name), writer.fs.digests.get(name))
        for name in names
    ]


def load(store: Store, step_dir: str, manifest: dict[str, Any], into: Any) -> tuple[bool, str | None]:
    """Load the checkpoint of ``step_dir`` into ``into`` in place (collective). (True, None) when
    it loaded; (False, why) when a file some rank needed is missing or fails its check, so the
    caller falls back to an older checkpoint; every rank sees the same outcome.

    Raises when the files are sound but do not fit ``into`` (a missing key, another shape): an
    older checkpoint would not fit either, and training from scratch would then overwrite them.
    """
    local = store.local_dir(step_dir)
    directory = local or tempfile.mkdtemp(prefix="torchyard-dcp-load-")
    files = {str(f.get("path")): f for f in manifest.get("files", []) if isinstance(f, dict)}
    fetch = None if local else (lambda name, dest: store.fetch_to(step_dir, name, dest))
    reader = VerifyingReader(directory, files, fetch)
    try:
        with _single_process_is_fine():
            dcp.load(into, storage_reader=reader, no_dist=not dist.is_initialized())
        return True, None
    except CheckpointException as exc:  # DCP raises it on every rank when any rank failed
        if reader.failure or any(isinstance(error, CheckpointFileError) for error, _ in exc.failures.values()):
            return False, reader.failure or f"a file failed its check on another rank ({describe(exc)})"
        raise RuntimeError(
            f"checkpoint {store.manifest_uri(step_dir)} does not fit the state given to load it into: {describe(exc)}"
        ) from None
    finally:
        if local is None:
            shutil.rmtree(directory, ignore_errors=True)


@contextlib.contextmanager
def _single_process_is_fine() -> Iterator[None]:
    """DCP warns on every call without a process group; off a distributed run that is the intent."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        yield


def describe(exc: CheckpointException) -> str:
    """One line per failed rank instead of DCP's tracebacks."""
    failures = []
    for rank, (error, _trace) in sorted(exc.failures.items()):
        failures.append(f"rank {rank}: {''.join(traceback.format_exception_only(type(error), error)).strip()}")
    return "; ".join(failures)[:2000] or "torch.distributed.checkpoint failed"


class HashingFileSystem(FileSystem):
    """DCP's file access, hashing every file it writes on the way: ``digests`` maps each file name
    to (size, sha256), so a save never reads its own files back."""

    def __init__(self) -> None:
        super().__init__()
        self.digests: dict[str, tuple[int, str]] = {}

    @contextlib.contextmanager
    def create_stream(self, path, mode: str):
        if mode != "wb":
            with super().create_stream(path, mode) as stream:
                yield stream
            return
        with open(path, "wb") as fh:  # DCP fsyncs and closes it itself
            hashed = HashedFile(fh)
            yield hashed
        self.digests[os.path.basename(path)] = (hashed.hashing.size, hashed.hashing.hexdigest())

    def rename(self, path, new_path) -> None:
        super().rename(path, new_path)  # DCP writes .metadata.tmp, then renames it
        digest = self.digests.pop(os.path.basename(path), None)
        if digest is not None:
            self.digests[os.path.basename(new_path)] = digest


class RecordingWriter(FileSystemWriter):
    """DCP's FileSystemWriter, remembering which files this rank wrote and their hashes."""

    def __init__(self, directory: str) -> None:
        # One file per rank, fsynced by DCP; the directory is always fresh, so no overwrite warning.
        super().__init__(directory, single_file_per_rank=True, sync_files=True, overwrite=True)
        self.fs: HashingFileSystem = HashingFileSystem()
        self.written: list[str] = []
        self.is_coordinator = False

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)

    def write_data(self, plan, planner):
        future = super().write_data(plan, planner)
        self.written = sorted({result.storage_data.relative_path for result in future.wait()})
        return future


class VerifyingReader(FileSystemReader):
    """DCP's FileSystemReader that fetches (when ``fetch`` is given) and checks each file against
    the manifest before DCP opens it; ``failure`` says why a check failed."""

    def __init__(self, directory: str, files: dict[str, dict], fetch: Callable[[str, str], None] | None) -> None:
        super().__init__(directory)
        self.directory = directory
        self.files = files
        self.fetch = fetch
        self.failure: str | None = None
        self._checked: set[str] = set()

    def _check(self, name: str) -> None:
        if name in self._checked:
            return
        try:
            entry = self.files.get(name)
            if entry is None:
                raise CheckpointFileError(f"its manifest lists no {name}")
            path = os.path.join(self.directory, name)
            try:
                if self.fetch is not None:
                    self.fetch(name, path)
                size, sha256 = hash_file(path)
            except Exception as exc:  # noqa: BLE001 - missing, unreadable or not downloadable
                raise CheckpointFileError(f"{name} could not be read ({exc!r})") from exc
            if size != entry.get("size"):
                raise CheckpointFileError(f"{name} has {size} bytes, the manifest says {entry.get('size')}")
            if sha256 != entry.get("sha256"):
                raise CheckpointFileError(f"{name} fails its sha256 check")
        except CheckpointFileError as exc:
            self.failure = str(exc)
            raise
        self._checked.add(name)

    def read_metadata(self, *args: Any, **kwargs: Any):
        if kwargs.get("rank") is not None:
            # DCP's fallback to per-rank metadata files: Torchyard always writes the global one.
            raise FileNotFoundError("a Torchyard checkpoint has no per-rank metadata")
        self._check(METADATA_FILE)  # a pickle: never unpickled before its hash is checked
        return super().read_metadata(*args, **kwargs)

    def prepare_local_plan(self, plan):
        for name in sorted({self.storage_data[item.storage_index].relative_path for item in plan.items}):
            self._check(name)
        return super().prepare_local_plan(plan)


def cleanup(directory: str, private: bool) -> None:
    if private:
        with contextlib.suppress(OSError):
            shutil.rmtree(directory)

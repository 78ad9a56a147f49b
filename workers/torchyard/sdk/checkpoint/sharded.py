"""Sharded checkpoints through torch.distributed.checkpoint (DCP), under the manifest commit.

DCP plans which rank writes which bytes (a DTensor/FSDP shard is written by the rank that holds it,
replicated tensors once) and can load into a different world size or sharding than the one that
saved. What DCP lacks, Torchyard adds around it:

- Save: every rank writes its ``__<rank>_<n>.distcp`` files (rank 0 also DCP's ``.metadata``) into a
  local directory: the store's staging directory when the store is a filesystem path, else a
  private temporary directory whose files are then uploaded. A large state is split into several
  files written (and hashed, as they are written) side by side by DCP's writer threads; the caller
  gathers the entries and rank 0 commits the manifest exactly as for replicated state.
- Load: a reader that checks each file against the manifest's size and sha256 before DCP opens it,
  fetching it first from object storage. Only the files this rank's load plan needs are fetched
  and checked, side by side, and all of them before DCP reads any data: a bad file must leave the
  state loaded into untouched on every rank. ``.metadata`` (a pickle) is never read unchecked.
  The checked files' tensors are then copied from the page cache into the state in one copy
  (mapped_read.py) rather than through DCP's torch.load of every item.

Imported only when a sharded checkpoint is saved or loaded (it imports torch.distributed.checkpoint).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import shutil
import tempfile
import traceback
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import CheckpointException, FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from torchyard.sdk import context
from torchyard.sdk.checkpoint import mapped_read
from torchyard.sdk.checkpoint.hashing import HashedFile, hash_file, skip_torch_crc32
from torchyard.sdk.checkpoint.stores import FileEntry, Store
from torchyard.stream_contract import Manifest, ManifestFile

METADATA_FILE = ".metadata"
# A rank's state is split into one file per this many bytes, written and hashed side by side, as
# many as it has CPUs (over its node's ranks) and at most MAX_FILES: sha256 runs at about 1 GB/s
# on one core, less than a local NVMe disk writes.
BYTES_PER_FILE = 128 << 20
MAX_FILES = 4


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


def write(store: Store, step_dir: str, directory: str, state: Any, group: Any = None) -> list[FileEntry]:
    """Save ``state`` with DCP into ``directory`` (collective over ``group``, default: the default
    group), then hash or upload this rank's files. Returns their manifest entries."""
    writer = RecordingWriter(directory, thread_count=files_for(state))
    try:
        with _single_process_is_fine(), skip_torch_crc32():
            dcp.save(state, storage_writer=writer, process_group=group, no_dist=not dist.is_initialized())
    except CheckpointException as exc:  # a BaseException: turn it into an ordinary failure
        raise RuntimeError(describe(exc)) from None
    names = list(writer.written) + ([METADATA_FILE] if writer.is_coordinator else [])
    return [
        store.add_file(step_dir, name, os.path.join(directory, name), writer.fs.digests.get(name))
        for name in names
    ]


def files_for(state: Any) -> int:
    """How many files this rank's part of ``state`` is split into (see BYTES_PER_FILE)."""
    import torch

    tensors = 0
    nbytes = 0

    def visit(value: Any) -> None:
        nonlocal tensors, nbytes
        if isinstance(value, torch.Tensor):
            local = value.to_local() if hasattr(value, "to_local") else value
            tensors += 1
            nbytes += local.numel() * local.element_size()
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)

    visit(state)  # Stateful objects count for nothing here: their state_dict() may be costly
    # No more files than tensors: DCP would create the extra ones empty.
    return max(1, min(_threads(), tensors, math.ceil(nbytes / BYTES_PER_FILE)))


def _threads() -> int:
    """How many files a rank hashes side by side: its share of the node's CPUs, at most MAX_FILES."""
    return context.cpu_share(MAX_FILES)


def load(store: Store, step_dir: str, manifest: Manifest, into: Any) -> tuple[bool, str | None]:
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

    def __init__(self, directory: str, thread_count: int = 1) -> None:
        # ``thread_count`` files per rank, fsynced by DCP; the directory is always fresh, so no
        # overwrite warning.
        super().__init__(
            directory, single_file_per_rank=True, sync_files=True, overwrite=True, thread_count=thread_count
        )
        self.fs: HashingFileSystem = HashingFileSystem()
        self.directory = directory
        self.written: list[str] = []
        self.is_coordinator = False

    def set_up_storage_writer(self, is_coordinator: bool, *args: Any, **kwargs: Any) -> None:
        self.is_coordinator = is_coordinator
        super().set_up_storage_writer(is_coordinator, *args, **kwargs)

    def write_data(self, plan, planner):
        future = super().write_data(plan, planner)
        self.written = sorted({result.storage_data.relative_path for result in future.wait()})
        # A file of DCP's that got no item (the planner gave this rank fewer than it had threads)
        # would sit unlisted next to the others.
        for name in set(self.fs.digests) - set(self.written):
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(self.directory, name))
        return future


class VerifyingReader(FileSystemReader):
    """DCP's FileSystemReader that fetches (when ``fetch`` is given) and checks each file against
    the manifest before DCP opens it; ``failure`` says why a check failed."""

    def __init__(self, directory: str, files: dict[str, ManifestFile], fetch: Callable[[str, str], None] | None) -> None:
        super().__init__(directory)
        self.directory = directory
        self.files = files
        self.fetch = fetch
        self.failure: str | None = None
        self._checked: set[str] = set()

    def _check_all(self, names: list[str]) -> None:
        """Check every file in ``names`` (side by side when there are several); raise the first
        failure, in name order, after all are done."""
        names = [name for name in names if name not in self._checked]
        if len(names) > 1 and _threads() > 1:
            with ThreadPoolExecutor(min(len(names), _threads()), thread_name_prefix="torchyard-verify") as pool:
                failures = list(pool.map(self._problem_with, names))
        else:
            failures = [self._problem_with(name) for name in names]
        for name, failure in zip(names, failures, strict=True):
            if failure is not None:
                self.failure = failure
                raise CheckpointFileError(failure)
            self._checked.add(name)

    def _problem_with(self, name: str) -> str | None:
        """Why ``name`` fails its check (fetched first when from object storage), or None."""
        entry = self.files.get(name)
        if entry is None:
            return f"its manifest lists no {name}"
        path = os.path.join(self.directory, name)
        try:
            if self.fetch is not None:
                self.fetch(name, path)
            size, sha256 = hash_file(path)
        except Exception as exc:  # noqa: BLE001 - missing, unreadable or not downloadable
            return f"{name} could not be read ({exc!r})"
        if size != entry.get("size"):
            return f"{name} has {size} bytes, the manifest says {entry.get('size')}"
        if sha256 != entry.get("sha256"):
            return f"{name} fails its sha256 check"
        return None

    def read_metadata(self, *args: Any, **kwargs: Any):
        if kwargs.get("rank") is not None:
            # DCP's fallback to per-rank metadata files: Torchyard always writes the global one.
            raise FileNotFoundError("a Torchyard checkpoint has no per-rank metadata")
        self._check_all([METADATA_FILE])  # a pickle: never unpickled before its hash is checked
        return super().read_metadata(*args, **kwargs)

    def prepare_local_plan(self, plan):
        # Every file this rank reads is checked here, before DCP reads any data into the state,
        # and DCP fails the load on every rank when one rank raises here.
        self._check_all(sorted({self.storage_data[item.storage_index].relative_path for item in plan.items}))
        return super().prepare_local_plan(plan)

    def read_data(self, plan, planner):
        """Each file's tensors copied from its mapping into the state (mapped_read.py); DCP's own
        reader for whatever that does not cover."""
        per_file: dict[str, list] = {}
        for item in plan.items:
            per_file.setdefault(self.storage_data[item.storage_index].relative_path, []).append(item)
        left = []
        for name, items in per_file.items():
            left += mapped_read.read_file(os.path.join(self.directory, name), items, self.storage_data, planner)
        return super().read_data(dataclasses.replace(plan, items=left), planner)


def cleanup(directory: str, private: bool) -> None:
    if private:
        with contextlib.suppress(OSError):
            shutil.rmtree(directory)

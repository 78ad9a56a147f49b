"""A node's working directory: a copy of a cache entry (cache.py) that shares no inode with it.

The job may write into its own code (a config edited in place, a log beside the script,
`open(..., "w")` on a bundled file), and a hard link would carry that write into the cache and into
every later job on the machine; read-only modes do not prevent it (the owner may chmod, root ignores
modes). So files are cloned where the filesystem can share blocks copy-on-write (FICLONE: btrfs, XFS
with reflink, bcachefs; a write then unshares the block), and copied in the kernel otherwise
(`copy_file_range`, no trip through user space), several files at once. Each file is checked
against the entry's manifest (manifest.py) as it is copied.
"""

from __future__ import annotations

import errno
import fcntl
import os
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .decoding import PROGRESS_EVERY
from .hashing import CHUNK
from .manifest import FileEntry, Manifest, StaleEntry

FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h
# Errors that mean "this filesystem (pair) cannot do that", after which the next method is tried.
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM,
                errno.EBADF, errno.ETXTBSY}
# File creation is mostly syscalls that release the GIL; a few threads keep the disk and both cores busy.
COPY_THREADS = max(2, min(4, os.cpu_count() or 1))


@dataclass
class CopyResult:
    files: int = 0
    size: int = 0
    cloned: int = 0  # files that share blocks copy-on-write with the cache

    @property
    def method(self) -> str:
        if self.cloned == self.files:
            return "copy-on-write clones" if self.files else "nothing to copy"
        return "in-kernel copies" if not self.cloned else "copy-on-write clones and in-kernel copies"


class _Copier:
    """Copies one file at a time, remembering what the filesystem refused (clone, then
    copy_file_range) so that each method is tried once per tree, not once per file."""

    def __init__(self) -> None:
        self.can_clone = True
        self.can_copy_range = True
        self.cloned = 0
        self.lock = threading.Lock()

    def copy(self, root: Path, dest: Path, entry: FileEntry) -> None:
        source = os.open(os.path.join(root, entry.path), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            # The file about to be copied is the file the manifest describes: a change between the
            # entry's check and this copy is caught here, not copied into a job.
            problem = entry.differs(os.fstat(source))
            if problem:
                raise StaleEntry(problem)
            mode = 0o755 if entry.executable else 0o644
            target = os.open(os.path.join(dest, entry.path),
                             os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
            try:
                if entry.size:
                    self._fill(source, target, entry.size)
            finally:
                os.close(target)
        finally:
            os.close(source)

    def _fill(self, source: int, target: int, size: int) -> None:
        if self.can_clone:
            try:
                fcntl.ioctl(target, FICLONE, source)
                with self.lock:
                    self.cloned += 1
                return
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise
                self.can_clone = False
        left = size
        if self.can_copy_range:
            try:
                while left > 0:
                    copied = os.copy_file_range(source, target, left)
                    if copied == 0:
                        break
                    left -= copied
            except OSError as exc:
                if exc.errno not in _UNSUPPORTED:
                    raise
                self.can_copy_range = False
        # Whatever copy_file_range did not do (a filesystem without it): both offsets have moved on.
        while left > 0:
            data = os.read(source, min(left, CHUNK))
            if not data:
                raise StaleEntry("a file became shorter while it was being copied")
            view = memoryview(data)
            while view:
                view = view[os.write(target, view):]
            left -= len(data)


def copy_tree(root: Path, manifest: Manifest, dest: Path, *, threads: int = COPY_THREADS,
              progress: Callable[[], None] | None = None) -> CopyResult:
    """A fresh, writable copy of the entry at `dest` (created; it must not exist), sharing no inode with
    it. Hard links inside the bundle stay hard links, inside `dest`. StaleEntry when a file no longer
    matches the manifest; `dest` is removed on any failure. `progress` is called from this thread
    every PROGRESS_EVERY seconds or so (heartbeats, stop checks; what it raises stops the copy)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    dest.mkdir()
    copier = _Copier()
    result = CopyResult()
    try:
        for directory in manifest.directories:
            os.mkdir(os.path.join(dest, directory), 0o755)
        first_of: dict[int, FileEntry] = {}
        unique: list[FileEntry] = []
        linked: list[tuple[FileEntry, FileEntry]] = []
        for entry in manifest.files:
            if entry.ino in first_of:
                linked.append((entry, first_of[entry.ino]))
            else:
                first_of[entry.ino] = entry
                unique.append(entry)
        _run_all(lambda entry: copier.copy(root, dest, entry), unique, threads, progress or (lambda: None))
        for entry, original in linked:
            os.link(os.path.join(dest, original.path), os.path.join(dest, entry.path), follow_symlinks=False)
        for path, target in manifest.symlinks:
            os.symlink(target, os.path.join(dest, path))
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    result.files = len(unique)
    result.size = sum(entry.size for entry in unique)
    result.cloned = copier.cloned
    return result


def _run_all(work: Callable[[FileEntry], None], items: list[FileEntry], threads: int,
             progress: Callable[[], None]) -> None:
    """`work(item)` for every item on `threads` threads, while this one calls `progress`; the first
    failure (a worker's, or what `progress` raised) is raised once every worker stopped."""
    if threads <= 1 or len(items) < 64:
        due = time.monotonic() + PROGRESS_EVERY
        for item in items:
            work(item)
            if time.monotonic() >= due:
                progress()
                due = time.monotonic() + PROGRESS_EVERY
        return
    failed: list[BaseException] = []
    cursor = iter(items)
    take = threading.Lock()

    def worker() -> None:
        while not failed:
            with take:
                item = next(cursor, None)
            if item is None:
                return
            try:
                work(item)
            except BaseException as exc:
                failed.append(exc)

    workers = [threading.Thread(target=worker, name="workdir-copy", daemon=True) for _ in range(threads)]
    for thread in workers:
        thread.start()
    try:
        for thread in workers:
            while thread.is_alive():
                thread.join(PROGRESS_EVERY)
                progress()
    except BaseException as exc:
        failed.append(exc)  # the workers stop at their next file
        for thread in workers:
            thread.join()
        raise
    if failed:
        raise failed[0]


def copy_plain_tree(source: Path, dest: Path) -> None:
    """A directory without a manifest (not a cache entry): copied as it is, links kept as links."""
    shutil.copytree(source, dest, symlinks=True)

"""A cache entry's manifest, and working directories made from it.

An unpacked bundle in the machine's cache is written once, verified once (its archive's sha256, as it
was unpacked) and then only read. Its manifest lists every directory, link and file with the size,
mtime, ctime and inode the file had when the entry was committed; any later change to a file through
the filesystem (a write, a truncation, a chmod, a replacement) moves its mtime or ctime or inode, so
comparing `lstat` against the manifest (a few milliseconds for thousands of files) tells a sound
entry from a touched one without reading a byte. A touched entry is fetched again, never copied.

A node's working directory is a copy of the entry that shares no inode with it: the job may write
into its own code (a config edited in place, a log beside the script, `open(..., "w")` on a bundled
file), and a hard link would carry that write into the cache and into every later job on the
machine; read-only modes do not prevent it (the owner may chmod, root ignores modes). So files are
cloned where the filesystem can share blocks copy-on-write (FICLONE: btrfs, XFS with reflink, bcachefs;
a write then unshares the block), and copied in the kernel otherwise (`copy_file_range`, no trip
through user space), several files at once.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import posixpath
import shutil
import stat
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchyard.bundles import PROGRESS_EVERY, BundleInfo

MANIFEST_VERSION = 2
FICLONE = 0x40049409  # _IOW(0x94, 9, int), linux/fs.h
# Errors that mean "this filesystem (pair) cannot do that", after which the next method is tried.
_UNSUPPORTED = {errno.EOPNOTSUPP, errno.ENOTTY, errno.EXDEV, errno.EINVAL, errno.ENOSYS, errno.EPERM,
                errno.EBADF, errno.ETXTBSY}
# File creation is mostly syscalls that release the GIL; a few threads keep the disk and both cores busy.
COPY_THREADS = max(2, min(4, os.cpu_count() or 1))
_CHUNK = 1 << 20


class StaleEntry(Exception):
    """A cache entry differs from its manifest; the message names the first difference."""


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    executable: bool
    mtime_ns: int
    ctime_ns: int
    ino: int

    def differs(self, info: os.stat_result) -> str | None:
        if not stat.S_ISREG(info.st_mode):
            return f"{self.path} is no longer a regular file"
        if info.st_size != self.size:
            return f"{self.path} is {info.st_size} bytes, not {self.size}"
        if (info.st_mtime_ns, info.st_ctime_ns, info.st_ino) != (self.mtime_ns, self.ctime_ns, self.ino):
            return f"{self.path} was modified or replaced"
        return None


@dataclass
class Manifest:
    """What a committed cache entry holds; stored as JSON in its `.ok` marker."""

    sha256: str
    directories: list[str] = field(default_factory=list)  # parents before children
    files: list[FileEntry] = field(default_factory=list)
    symlinks: list[tuple[str, str]] = field(default_factory=list)
    unpacked_size: int = 0
    built_at: float = 0.0

    def to_json(self) -> str:
        return json.dumps({
            "version": MANIFEST_VERSION, "sha256": self.sha256, "built_at": self.built_at,
            "unpacked_size": self.unpacked_size, "directories": self.directories,
            "files": [[f.path, f.size, int(f.executable), f.mtime_ns, f.ctime_ns, f.ino] for f in self.files],
            "symlinks": [list(link) for link in self.symlinks],
        }, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest | None:
        """The manifest, or None for a marker of an older layout (or an unreadable one)."""
        try:
            data: dict[str, Any] = json.loads(text)
            if data.get("version") != MANIFEST_VERSION:
                return None
            return cls(
                sha256=str(data["sha256"]), built_at=float(data["built_at"]),
                unpacked_size=int(data["unpacked_size"]), directories=[str(d) for d in data["directories"]],
                files=[FileEntry(str(p), int(s), bool(x), int(m), int(c), int(i)) for p, s, x, m, c, i in data["files"]],
                symlinks=[(str(p), str(t)) for p, t in data["symlinks"]],
            )
        except (ValueError, KeyError, TypeError):
            return None

    @classmethod
    def load(cls, marker: Path) -> Manifest | None:
        try:
            return cls.from_json(marker.read_text(encoding="utf-8"))
        except (FileNotFoundError, NotADirectoryError, UnicodeDecodeError):
            return None


def record(root: Path, info: BundleInfo, *, sha256: str, built_at: float) -> Manifest:
    """The manifest of a freshly unpacked entry, from lstat of what the unpacking created."""
    directories = set(info.directories) - {".", ""}  # "./" is a member of archives tar made from "."
    for path in [f["path"] for f in info.files] + list(info.symlinks):
        parent = posixpath.dirname(path)
        while parent and parent not in directories:
            directories.add(parent)
            parent = posixpath.dirname(parent)
    files = []
    for item in info.files:
        found = os.lstat(os.path.join(root, item["path"]))
        files.append(FileEntry(item["path"], found.st_size, bool(found.st_mode & stat.S_IXUSR),
                               found.st_mtime_ns, found.st_ctime_ns, found.st_ino))
    return Manifest(sha256=sha256, directories=sorted(directories), files=files,
                    symlinks=sorted(info.symlinks.items()), unpacked_size=info.unpacked_size, built_at=built_at)


def verify(root: Path, manifest: Manifest) -> str | None:
    """The first difference between the entry on disk and its manifest, or None: by lstat only."""
    try:
        for directory in manifest.directories:
            if not stat.S_ISDIR(os.lstat(os.path.join(root, directory)).st_mode):
                return f"{directory} is no longer a directory"
        for entry in manifest.files:
            problem = entry.differs(os.lstat(os.path.join(root, entry.path)))
            if problem:
                return problem
        for path, target in manifest.symlinks:
            if os.readlink(os.path.join(root, path)) != target:
                return f"{path} no longer links to {target}"
    except FileNotFoundError as exc:
        return f"{os.path.relpath(exc.filename or '?', root)} is missing"
    except OSError as exc:
        return f"{os.path.relpath(exc.filename or '?', root)}: {exc.strerror}"
    return None


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
            data = os.read(source, min(left, _CHUNK))
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

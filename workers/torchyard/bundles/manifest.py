"""A cache entry's manifest (cache.py): what a committed entry holds, and the check that it still does.

An unpacked bundle in the machine's cache is written once, verified once (its archive's sha256, as it
was unpacked) and then only read. Its manifest lists every directory, link and file with the size,
mtime, ctime and inode the file had when the entry was committed; any later change to a file through
the filesystem (a write, a truncation, a chmod, a replacement) moves its mtime or ctime or inode, so
comparing `lstat` against the manifest (a few milliseconds for thousands of files) tells a sound
entry from a touched one without reading a byte. A touched entry is fetched again, never copied.
"""

from __future__ import annotations

import json
import os
import posixpath
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from .checks import BundleInfo

MANIFEST_VERSION = 2


class StaleEntry(Exception):
    """A cache entry differs from its manifest; the message names the first difference."""


class ManifestJson(TypedDict):
    """A Manifest as its marker holds it: each file [path, size, executable (0/1), mtime_ns,
    ctime_ns, inode], each link [path, target]."""

    version: int
    sha256: str
    built_at: float
    unpacked_size: int
    directories: list[str]
    files: list[list[str | int]]
    symlinks: list[list[str]]


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
        data: ManifestJson = {
            "version": MANIFEST_VERSION, "sha256": self.sha256, "built_at": self.built_at,
            "unpacked_size": self.unpacked_size, "directories": self.directories,
            "files": [[f.path, f.size, int(f.executable), f.mtime_ns, f.ctime_ns, f.ino] for f in self.files],
            "symlinks": [list(link) for link in self.symlinks],
        }
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Manifest | None:
        """The manifest, or None for a marker of an older layout (or an unreadable one)."""
        try:
            data: ManifestJson = json.loads(text)  # checked below, field by field
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


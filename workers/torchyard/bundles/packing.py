"""Packing: a project directory as the canonical archive (`pack_directory`), ignore files applied.

The archive is a zstd-compressed POSIX tar whose entries are sorted, owned by 0:0, dated 0 and moded
0644/0755, so the same directory always packs to the same bytes and its sha256 names it: an
unchanged project uploads nothing. A symlink that leads out of the project is refused, and so is a
project over the server's limit (naming its biggest files).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from .checks import BundleError, BundleTooLarge
from .hashing import CHUNK, InOrder

ARCHIVE_SUFFIX = ".tar.zst"
ZSTD_LEVEL = 1  # text still shrinks 3-4x; packing a project must never be the slow part
# Multi-threaded zstd writes the same bytes whatever the number of workers (>= 1), so a bundle's
# sha256 does not depend on the machine that packed it; 0 (single-threaded mode) would differ.
ZSTD_THREADS = -1
# Never worth shipping, whatever the ignore files say; a user's .torchyardignore can add more.
ALWAYS_IGNORED = (".git/", ".hg/", ".svn/", "__pycache__/", "*.py[co]", ".venv/", ".torchyard/", ".DS_Store")
IGNORE_FILES = (".gitignore", ".torchyardignore")


@dataclass
class PackedBundle:
    path: Path
    sha256: str
    size: int
    unpacked_size: int
    files: list[str]


class _IgnoreRules:
    """gitignore semantics per directory: every .gitignore / .torchyardignore applies below its own
    folder, a deeper file's verdict wins, and a later pattern wins within one file."""

    def __init__(self, root: Path) -> None:
        import pathspec

        self._pathspec = pathspec
        self.root = root
        self.specs: list[tuple[str, Any]] = [("", pathspec.GitIgnoreSpec.from_lines(ALWAYS_IGNORED))]

    def enter(self, rel_dir: str) -> None:
        directory = self.root / rel_dir
        lines: list[str] = []
        for name in IGNORE_FILES:
            with contextlib.suppress(OSError, UnicodeDecodeError):
                lines.extend((directory / name).read_text(encoding="utf-8").splitlines())
        if lines:
            self.specs.append((rel_dir, self._pathspec.GitIgnoreSpec.from_lines(lines)))

    def ignored(self, rel_path: str, is_dir: bool) -> bool:
        verdict = False
        for base, spec in self.specs:
            if base and not rel_path.startswith(base + "/"):
                continue
            inner = rel_path[len(base) + 1:] if base else rel_path
            result = spec.check_file(inner + "/" if is_dir else inner)
            if result.include is not None:
                verdict = result.include
        return verdict


def _collect(source: Path) -> tuple[list[tuple[str, os.stat_result]], dict[str, str]]:
    """(regular files with their stat, symlinks -> relative target), sorted, ignore rules applied."""
    rules = _IgnoreRules(source)
    files: list[tuple[str, os.stat_result]] = []
    links: dict[str, str] = {}
    root = source.resolve()
    for dirpath, dirnames, filenames in os.walk(source, followlinks=False):
        rel_dir = os.path.relpath(dirpath, source).replace(os.sep, "/")
        rel_dir = "" if rel_dir == "." else rel_dir
        rules.enter(rel_dir)
        keep_dirs = []
        for name in sorted(dirnames):
            rel = posixpath.join(rel_dir, name)
            full = os.path.join(dirpath, name)
            if rules.ignored(rel, is_dir=True):
                continue
            if os.path.islink(full):
                links[rel] = _link_inside(root, Path(full), rel)
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in sorted(filenames):
            rel = posixpath.join(rel_dir, name)
            if rules.ignored(rel, is_dir=False):
                continue
            full = os.path.join(dirpath, name)
            info = os.lstat(full)
            if stat.S_ISLNK(info.st_mode):
                links[rel] = _link_inside(root, Path(full), rel)
            elif stat.S_ISREG(info.st_mode):
                files.append((rel, info))
            # Sockets, FIFOs and devices are not code: left out.
    files.sort()
    return files, dict(sorted(links.items()))


def _link_inside(root: Path, link: Path, rel: str) -> str:
    """The link's target relative to its folder, or BundleError when it leads out of the project."""
    target = (link.parent / os.readlink(link)).resolve()
    if not target.is_relative_to(root):
        raise BundleError(
            f"is a symlink to {os.readlink(link)}, outside the project; copy the files in or list it in .torchyardignore",
            rel,
        )
    return os.path.relpath(target, link.parent.resolve()).replace(os.sep, "/")


_QUEUED_WRITES = 8  # compressed megabytes the packing may run ahead of the hashing


class _HashingWriter(io.RawIOBase):
    """The compressor's output, hashed and written to the archive file behind the packing thread
    (which reads files and feeds zstd), in the order the compressor wrote. `finish()` waits for the
    last write and raises its failure, if any."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0
        self.behind = InOrder(self._hash_and_write, name="bundle-hasher", queued=_QUEUED_WRITES)

    def _hash_and_write(self, data: bytes) -> None:
        self.digest.update(data)
        self.raw.write(data)

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        data = bytes(data)  # the compressor's own bytes (no copy); a caller's buffer may be reused
        self.behind.put(data)
        self.size += len(data)
        return len(data)

    def finish(self) -> None:
        self.behind.finish()


def _tarinfo(name: str, *, size: int = 0, executable: bool = False, link: str | None = None) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    info.mode = 0o755 if executable else 0o644
    if link is not None:
        info.type = tarfile.SYMTYPE
        info.linkname = link
        info.mode = 0o777
    return info


class _TarWriter:
    """What tarfile's 'w|' mode writes, byte for byte (its own TarInfo.tobuf makes every header, the
    end blocks and record padding are its), with file data passed on in megabyte writes instead of
    through tarfile's stream buffer, which re-copies its whole buffer on every write."""

    def __init__(self, out: Any) -> None:
        self.out = out
        self.offset = 0
        self.pending: list[bytes] = []
        self.pending_size = 0

    def _put(self, data: bytes) -> None:
        self.offset += len(data)
        if len(data) >= CHUNK:
            self._flush()
            self.out.write(data)
            return
        self.pending.append(data)
        self.pending_size += len(data)
        if self.pending_size >= CHUNK:
            self._flush()

    def _flush(self) -> None:
        if self.pending:
            self.out.write(b"".join(self.pending))
            self.pending, self.pending_size = [], 0

    def add(self, info: tarfile.TarInfo, path: str | None = None) -> None:
        self._put(info.tobuf(tarfile.PAX_FORMAT, tarfile.ENCODING, "surrogateescape"))
        if path is None:
            return
        left = info.size
        with open(path, "rb", buffering=0) as handle:
            while left:
                chunk = handle.read(min(left, CHUNK))
                if not chunk:
                    raise BundleError("became shorter while it was being packed", info.name)
                self._put(chunk)
                left -= len(chunk)
        if info.size % tarfile.BLOCKSIZE:
            self._put(bytes(tarfile.BLOCKSIZE - info.size % tarfile.BLOCKSIZE))

    def close(self) -> None:
        self._put(bytes(tarfile.BLOCKSIZE * 2))
        if self.offset % tarfile.RECORDSIZE:
            self._put(bytes(tarfile.RECORDSIZE - self.offset % tarfile.RECORDSIZE))
        self._flush()


def pack_directory(source: Path, dest: Path, *, max_unpacked_bytes: int | None = None) -> PackedBundle:
    """Pack `source` (respecting .gitignore files and .torchyardignore) into the canonical archive `dest`.

    Raises BundleTooLarge naming the biggest files when the packed files would exceed
    `max_unpacked_bytes`, and BundleError for a symlink that leads out of the project.
    """
    import zstandard

    source = Path(source)
    if not source.is_dir():
        raise BundleError(f"{source} is not a directory")
    files, links = _collect(source)
    total = sum(info.st_size for _, info in files)
    if max_unpacked_bytes is not None and total > max_unpacked_bytes:
        biggest = sorted(((rel, info.st_size) for rel, info in files), key=lambda item: -item[1])[:5]
        raise BundleTooLarge(total, max_unpacked_bytes, biggest)
    entries = sorted([(rel, info, None) for rel, info in files] + [(rel, None, target) for rel, target in links.items()],
                     key=lambda entry: entry[0])
    with open(dest, "wb") as raw:
        hashing = _HashingWriter(raw)
        try:
            compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS, write_checksum=True)
            with compressor.stream_writer(hashing, write_size=CHUNK, closefd=False) as compressed:  # type: ignore[arg-type]
                tar = _TarWriter(compressed)
                for rel, info, target in entries:
                    if info is None:
                        tar.add(_tarinfo(rel, link=target))
                        continue
                    executable = bool(info.st_mode & stat.S_IXUSR)
                    tar.add(_tarinfo(rel, size=info.st_size, executable=executable), os.path.join(source, rel))
                tar.close()
        finally:
            hashing.finish()
    return PackedBundle(
        path=Path(dest), sha256=hashing.digest.hexdigest(), size=hashing.size, unpacked_size=total,
        files=[rel for rel, _ in files] + list(links),
    )


"""Code bundles: a user's project directory as one content-addressed, canonical archive.

A bundle is a zstd-compressed POSIX tar whose entries are sorted, owned by 0:0, dated 0 and moded
0644/0755, so the same directory always packs to the same bytes and its sha256 names it: an
unchanged project uploads nothing. The CLI packs (`pack_directory`), the server checks an upload
(`inspect_archive`) before it stores it, and the node that runs it checks again while unpacking
(`unpack`): an archive is hostile until proven otherwise, wherever it came from.

Refused, naming the member: absolute paths, `..` components, symlinks or hard links that lead
outside the bundle, members written through a symlink, device files and FIFOs, more than
MAX_MEMBERS entries, an unpacked size over the limit, an implausible compression ratio (a bomb),
and anything that is not a tar archive (zstd, gzip or plain).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import shutil
import stat
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

ARCHIVE_SUFFIX = ".tar.zst"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ZSTD_LEVEL = 1  # text still shrinks 3-4x; packing a project must never be the slow part
# Multi-threaded zstd writes the same bytes whatever the number of workers (>= 1), so a bundle's
# sha256 does not depend on the machine that packed it; 0 (single-threaded mode) would differ.
ZSTD_THREADS = -1
# Never worth shipping, whatever the ignore files say; a user's .torchyardignore can add more.
ALWAYS_IGNORED = (".git/", ".hg/", ".svn/", "__pycache__/", "*.py[co]", ".venv/", ".torchyard/", ".DS_Store")
IGNORE_FILES = (".gitignore", ".torchyardignore")
MAX_MEMBERS = 100_000
# A real project compresses 2-10x; a bomb compresses 1000x. Small bundles are never refused for it.
MAX_RATIO = 200
RATIO_CHECKED_ABOVE = 32 << 20
DEFAULT_MAX_BYTES = 200 * 1024 * 1024
_CHUNK = 1 << 20


class BundleError(ValueError):
    """A bundle (or a directory to pack) that is refused; the message names the member."""

    def __init__(self, message: str, member: str | None = None) -> None:
        super().__init__(f"{member}: {message}" if member else message)
        self.member = member


class BundleTooLarge(BundleError):
    def __init__(self, total: int, limit: int, biggest: list[tuple[str, int]]) -> None:
        listed = ", ".join(f"{path} ({size_text(size)})" for path, size in biggest)
        super().__init__(
            f"the project holds {size_text(total)} of files, over the server's limit of {size_text(limit)}; "
            f"biggest: {listed}. Leave files out with .torchyardignore (gitignore syntax)."
        )
        self.biggest = biggest


def size_text(size: float) -> str:
    """A byte count for people: 512 B, 12.3 kB, 4.5 MB, 1.2 GB (the CLI, the supervisor and the
    server all say sizes this way)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


@dataclass
class PackedBundle:
    path: Path
    sha256: str
    size: int
    unpacked_size: int
    files: list[str]


@dataclass
class BundleInfo:
    """What `inspect_archive` found: every member that will be unpacked."""

    unpacked_size: int = 0
    files: list[dict[str, Any]] = field(default_factory=list)  # {"path", "size", "mode"}; links too
    symlinks: dict[str, str] = field(default_factory=dict)

    def paths(self) -> set[str]:
        return {f["path"] for f in self.files} | set(self.symlinks)


# --- packing --------------------------------------------------------------------------------------
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
            full = Path(dirpath) / name
            if rules.ignored(rel, is_dir=True):
                continue
            if full.is_symlink():
                links[rel] = _link_inside(root, full, rel)
                continue
            keep_dirs.append(name)
        dirnames[:] = keep_dirs
        for name in sorted(filenames):
            rel = posixpath.join(rel_dir, name)
            if rules.ignored(rel, is_dir=False):
                continue
            full = Path(dirpath) / name
            info = full.lstat()
            if stat.S_ISLNK(info.st_mode):
                links[rel] = _link_inside(root, full, rel)
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


class _HashingWriter(io.RawIOBase):
    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()
        self.size = 0

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        view = memoryview(data)
        self.digest.update(view)
        self.raw.write(view)
        self.size += len(view)
        return len(view)


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
        compressor = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=ZSTD_THREADS, write_checksum=True)
        with (
            compressor.stream_writer(hashing, closefd=False) as compressed,  # type: ignore[arg-type]
            tarfile.open(fileobj=compressed, mode="w|", format=tarfile.PAX_FORMAT, bufsize=_CHUNK,  # type: ignore[call-overload]
                         copybufsize=_CHUNK) as tar,
        ):
            for rel, info, target in entries:
                if info is None:
                    tar.addfile(_tarinfo(rel, link=target))
                    continue
                executable = bool(info.st_mode & stat.S_IXUSR)
                with open(source / rel, "rb") as handle:
                    tar.addfile(_tarinfo(rel, size=info.st_size, executable=executable), handle)
    return PackedBundle(
        path=Path(dest), sha256=hashing.digest.hexdigest(), size=hashing.size, unpacked_size=total,
        files=[rel for rel, _ in files] + list(links),
    )


# --- checking -------------------------------------------------------------------------------------
class _Prefixed(io.RawIOBase):
    """A stream with bytes already read from its head put back in front."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head = head
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer)
        if self.head:
            n = min(len(view), len(self.head))
            view[:n] = self.head[:n]
            self.head = self.head[n:]
            return n
        data = self.rest.read(len(view))
        view[: len(data)] = data
        return len(data)


class _Counting(io.RawIOBase):
    """Counts the bytes read through it (the compressed size, for the ratio check)."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.count = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        data = self.raw.read(len(buffer))
        memoryview(buffer)[: len(data)] = data
        self.count += len(data)
        return len(data)


@contextlib.contextmanager
def _open_tar(fileobj: IO[bytes]) -> Iterator[tuple[tarfile.TarFile, _Counting]]:
    import zstandard

    counting = _Counting(fileobj)
    head = counting.read(4)
    stream: IO[bytes] = io.BufferedReader(_Prefixed(head, counting), _CHUNK)  # type: ignore[arg-type]
    if head == ZSTD_MAGIC:
        # A bounded window: a crafted frame cannot make the decompressor allocate gigabytes.
        stream = zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(stream, read_across_frames=True)
    try:
        with tarfile.open(fileobj=stream, mode="r|*", bufsize=_CHUNK) as tar:
            yield tar, counting
    except (tarfile.TarError, zstandard.ZstdError, EOFError, OSError) as exc:
        raise BundleError(f"not a readable tar archive (zstd, gzip or plain): {exc}") from None


def _safe_name(name: str) -> str:
    if not name or "\x00" in name:
        raise BundleError("has an empty or NUL-containing name", name or "<empty>")
    if name.startswith("/") or posixpath.isabs(name):
        raise BundleError("has an absolute path", name)
    if ".." in name.split("/"):
        raise BundleError("has a '..' component", name)
    return posixpath.normpath(name)


class _Checker:
    """Applies the rules member by member, in archive order (hard links must name an earlier file)."""

    def __init__(self, *, max_unpacked_bytes: int, compressed: _Counting, max_ratio: float) -> None:
        self.max_unpacked_bytes = max_unpacked_bytes
        self.compressed = compressed
        self.max_ratio = max_ratio
        self.info = BundleInfo()
        self.regular: set[str] = set()
        self.dirs: set[str] = set()
        self.count = 0

    def check(self, member: tarfile.TarInfo) -> str:
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise BundleError(f"more than {MAX_MEMBERS} members")
        name = _safe_name(member.name)
        parents = name.split("/")[:-1]
        for i in range(1, len(parents) + 1):
            prefix = "/".join(parents[:i])
            if prefix in self.info.symlinks:
                raise BundleError(f"is written through the symlink {prefix}", member.name)
        if name in self.regular or name in self.info.symlinks:
            raise BundleError("appears twice", member.name)
        if member.isdir():
            self.dirs.add(name)
            return name
        if member.issym():
            target = member.linkname
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
            if posixpath.isabs(target) or resolved == ".." or resolved.startswith("../"):
                raise BundleError(f"is a symlink to {target!r}, outside the bundle", member.name)
            self.info.symlinks[name] = target
            return name
        if member.islnk():
            target = posixpath.normpath(member.linkname)
            if target not in self.regular:
                raise BundleError(f"is a hard link to {member.linkname!r}, not an earlier file of the bundle", member.name)
            self.regular.add(name)
            self.info.files.append({"path": name, "size": 0, "mode": member.mode & 0o777})
            return name
        if not member.isreg():
            kind = "a FIFO" if member.isfifo() else "a device file" if member.isdev() else "not a regular file"
            raise BundleError(f"is {kind}", member.name)
        self.regular.add(name)
        self.info.unpacked_size += member.size
        if self.info.unpacked_size > self.max_unpacked_bytes:
            raise BundleError(f"the bundle unpacks to more than {size_text(self.max_unpacked_bytes)}", member.name)
        self.info.files.append({"path": name, "size": member.size, "mode": member.mode & 0o777})
        return name

    def check_ratio(self) -> None:
        unpacked = self.info.unpacked_size
        if unpacked > RATIO_CHECKED_ABOVE and unpacked > self.max_ratio * max(self.compressed.count, 1):
            raise BundleError(
                f"unpacks to {size_text(unpacked)} from {size_text(self.compressed.count)}: an implausible compression "
                f"ratio (over {self.max_ratio:g}:1)"
            )


def inspect_archive(fileobj: IO[bytes], *, max_unpacked_bytes: int = DEFAULT_MAX_BYTES,
                    max_ratio: float = MAX_RATIO) -> BundleInfo:
    """Read an archive to its end without writing anything; BundleError on the first refused member."""
    with _open_tar(fileobj) as (tar, counting):
        checker = _Checker(max_unpacked_bytes=max_unpacked_bytes, compressed=counting, max_ratio=max_ratio)
        for member in tar:
            checker.check(member)
            if member.isreg():
                extracted = tar.extractfile(member)
                while extracted is not None and extracted.read(_CHUNK):
                    checker.check_ratio()
        checker.check_ratio()
    checker.info.files.sort(key=lambda f: f["path"])
    return checker.info


def unpack(archive: Path, target: Path, *, max_unpacked_bytes: int = DEFAULT_MAX_BYTES) -> BundleInfo:
    """Unpack into `target` (created; must not exist), applying every rule again: whatever the server
    let through, nothing is written outside `target`. Each file is created with O_EXCL|O_NOFOLLOW
    below a directory this function made itself, so no link planted by the archive is followed."""
    target = Path(target)
    target.mkdir(parents=True)
    made = {""}
    try:
        with open(archive, "rb") as raw, _open_tar(raw) as (tar, counting):
            checker = _Checker(max_unpacked_bytes=max_unpacked_bytes, compressed=counting, max_ratio=MAX_RATIO)
            for member in tar:
                name = checker.check(member)
                parent = posixpath.dirname(name)
                _make_dirs(target, parent, made)
                path = os.path.join(target, name)
                if member.isdir():
                    _make_dirs(target, name, made)
                elif member.issym():
                    os.symlink(member.linkname, path)
                elif member.islnk():
                    os.link(os.path.join(target, posixpath.normpath(member.linkname)), path, follow_symlinks=False)
                else:
                    mode = 0o755 if member.mode & 0o100 else 0o644
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
                    source = tar.extractfile(member)
                    with os.fdopen(fd, "wb") as out:
                        while source is not None and (chunk := source.read(_CHUNK)):
                            out.write(chunk)
                            checker.check_ratio()
            checker.check_ratio()
    except BaseException:
        shutil.rmtree(target, ignore_errors=True)
        raise
    return checker.info


def _make_dirs(target: Path, relative: str, made: set[str]) -> None:
    """Create `relative` under target one level at a time, refusing any level that exists as
    something else than a directory we made (a symlink the archive planted, say)."""
    parts = relative.split("/") if relative and relative != "." else []
    for i in range(1, len(parts) + 1):
        prefix = "/".join(parts[:i])
        if prefix in made:
            continue
        path = os.path.join(target, prefix)
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if os.path.islink(path) or not os.path.isdir(path):
                raise BundleError("would be written through a link or over a file", prefix) from None
        made.add(prefix)


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()

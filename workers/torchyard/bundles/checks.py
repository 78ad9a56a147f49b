"""What a bundle may hold, and the refusals: the limits, the member-by-member rules (`MemberChecker`),
the compression-bomb check (`check_ratio`), and the errors, each naming the member it refuses.

The same rules hold wherever an archive is read (the server checking an upload, a node unpacking a
download), so both read through unpacking.py, which applies them here in archive order.
"""

from __future__ import annotations

import posixpath
import tarfile
from dataclasses import dataclass, field
from typing import TypedDict

MAX_MEMBERS = 100_000
# A real project compresses 2-10x; a bomb compresses 1000x. Small bundles are never refused for it.
MAX_RATIO = 200
# A function's payload (its pickled arguments) is judged by its unpacked size against the limit
# alone: a compressible argument (an array of ones) is no bomb, and the limit bounds what it costs.
PAYLOAD_RATIO = None
RATIO_CHECKED_ABOVE = 32 << 20
DEFAULT_MAX_BYTES = 200 * 1024 * 1024
# After the end-of-archive blocks: record padding (10 kB for tar's default blocking, 1 MB at most for
# any blocking factor tar accepts); anything beyond is not an archive we made or should unpack.
MAX_TRAILING = 4 << 20


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


class BundleHashMismatch(BundleError):
    """The archive's bytes do not hash to the sha256 it was fetched as."""


def size_text(size: float) -> str:
    """A byte count for people: 512 B, 12.3 kB, 4.5 MB, 1.2 GB (the CLI, the supervisor and the
    server all say sizes this way)."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{int(size)} B"


def unreadable(exc: BaseException | str) -> BundleError:
    return BundleError(f"not a readable tar archive (zstd, gzip or plain): {exc}")


def check_ratio(unpacked: int, compressed: int, max_ratio: float | None) -> None:
    """The compression-bomb check, on the bytes actually decompressed so far (whatever the headers
    claim): BundleError once they are more than `max_ratio` times the compressed bytes read. None:
    no ratio check (a function's payload, PAYLOAD_RATIO); the size limit alone bounds it."""
    if max_ratio is not None and unpacked > RATIO_CHECKED_ABOVE and unpacked > max_ratio * max(compressed, 1):
        raise BundleError(
            f"unpacks to more than {size_text(unpacked)} from {size_text(compressed)}: an "
            f"implausible compression ratio (over {max_ratio:g}:1)"
        )


class ArchiveMember(TypedDict):
    """A member of the archive that will be unpacked: a file, or a link (size 0)."""

    path: str
    size: int
    mode: int  # its permission bits


@dataclass
class BundleInfo:
    """What `inspect_archive` found: every member that will be unpacked."""

    unpacked_size: int = 0
    files: list[ArchiveMember] = field(default_factory=list)  # links too
    symlinks: dict[str, str] = field(default_factory=dict)
    directories: list[str] = field(default_factory=list)  # those the archive names itself
    sha256: str = ""  # of the bytes read, compressed
    compressed_size: int = 0

    def paths(self) -> set[str]:
        return {f["path"] for f in self.files} | set(self.symlinks)


def safe_name(name: str) -> str:
    if not name or "\x00" in name:
        raise BundleError("has an empty or NUL-containing name", name or "<empty>")
    if name.startswith("/") or posixpath.isabs(name):
        raise BundleError("has an absolute path", name)
    if ".." in name.split("/"):
        raise BundleError("has a '..' component", name)
    return posixpath.normpath(name)


class MemberChecker:
    """Applies the rules member by member, in archive order (hard links must name an earlier file)."""

    def __init__(self, *, max_unpacked_bytes: int) -> None:
        self.max_unpacked_bytes = max_unpacked_bytes
        self.info = BundleInfo()
        self.regular: set[str] = set()
        self.dirs: set[str] = set()
        self.count = 0

    def check(self, member: tarfile.TarInfo) -> str:
        self.count += 1
        if self.count > MAX_MEMBERS:
            raise BundleError(f"more than {MAX_MEMBERS} members")
        name = safe_name(member.name)
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

    def finish(self, *, sha256: str, compressed_size: int) -> BundleInfo:
        """What was checked, once the archive was read to its end (`sha256` of its bytes, "" unhashed)."""
        self.info.sha256 = sha256
        self.info.compressed_size = compressed_size
        self.info.directories = sorted(self.dirs)
        return self.info

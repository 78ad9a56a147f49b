"""Reading an archive to its end: checking it (`inspect_archive`, the server's check of an upload)
or unpacking it (`unpack_stream`, a node's download as it arrives, hashing it on the way), in one
pass: decoding.py hashes and decompresses, tar.py splits the members, checks.py judges each one in
archive order, and the tree writer here creates what passed, never outside the target.
"""

from __future__ import annotations

import contextlib
import os
import posixpath
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

from .checks import DEFAULT_MAX_BYTES, MAX_RATIO, BundleError, BundleHashMismatch, BundleInfo, MemberChecker
from .decoding import BundleReadError, Decoder, RawSource, Readable, SourceFailed
from .tar import Member, TarBytes, members


@contextlib.contextmanager
def _reading(fileobj: Readable, max_ratio: float | None, *, hashing: bool,
             progress: Callable[[], None] | None = None) -> Iterator[tuple[TarBytes, RawSource]]:
    """The archive's tar bytes, and its raw bytes as read (their count and sha256); a failure to read
    the source itself comes out as it was raised."""
    raw = RawSource(fileobj, hashing=hashing)
    decoder = Decoder(raw, max_ratio=max_ratio)
    try:
        yield TarBytes(decoder, progress), raw
    except SourceFailed as failed:
        raise BundleReadError(f"reading the archive failed: {failed.error}") from failed.error
    finally:
        decoder.stop()


def _read_to_the_end(checker: MemberChecker, data: TarBytes, raw: RawSource) -> BundleInfo:
    """What the checker let through, once what follows the archive (record padding) is read too, so
    that the hash covers every byte."""
    data.drain()
    return checker.finish(sha256=raw.sha256(), compressed_size=raw.count)


def inspect_archive(fileobj: Readable, *, max_unpacked_bytes: int = DEFAULT_MAX_BYTES,
                    max_ratio: float | None = MAX_RATIO, hashing: bool = False) -> BundleInfo:
    """Read an archive to its end without writing anything; BundleError on the first refused member.
    `max_ratio` None: no ratio check (a function's payload: see PAYLOAD_RATIO), the size limit only.
    The result carries the size of the bytes read and, with `hashing`, their sha256 (the server
    hashes the upload as it spools it, so it does not ask for it again)."""
    with _reading(fileobj, max_ratio, hashing=hashing) as (data, raw):
        checker = MemberChecker(max_unpacked_bytes=max_unpacked_bytes)
        for member in members(data):
            checker.check(member.info)
        info = _read_to_the_end(checker, data, raw)
    info.files.sort(key=lambda f: f["path"])
    return info


def unpack(archive: Path, target: Path, *, max_unpacked_bytes: int = DEFAULT_MAX_BYTES) -> BundleInfo:
    """Unpack the archive file into `target` (created; must not exist), applying every rule again:
    whatever the server let through, nothing is written outside `target`."""
    with open(archive, "rb") as raw:
        return unpack_stream(raw, target, max_unpacked_bytes=max_unpacked_bytes)


def unpack_stream(fileobj: Readable, target: Path, *, sha256: str | None = None,
                  max_unpacked_bytes: int = DEFAULT_MAX_BYTES, read_only: bool = False,
                  progress: Callable[[], None] | None = None, max_ratio: float | None = MAX_RATIO) -> BundleInfo:
    """Unpack an archive as its bytes arrive (a download, say) into `target` (created; must not exist),
    member by member, checking every rule; with `sha256`, the bytes must hash to it, checked once
    the last byte is read: BundleHashMismatch otherwise. On any failure nothing is left of `target`,
    so a caller that renames `target` into place only once this returns never publishes a partial or
    unverified tree.

    Each file is created with O_EXCL|O_NOFOLLOW below a directory this function made itself, so no
    link planted by the archive is followed. `read_only` creates files without write permission
    (a cache entry: its copies are the writable ones). `progress` is called from this thread every
    PROGRESS_EVERY seconds or so, also while the source is silent (a node's heartbeats); whatever it
    raises ends the unpacking like any failure."""
    target = Path(target)
    target.mkdir(parents=True)
    try:
        with _reading(fileobj, max_ratio, hashing=True, progress=progress) as (data, raw):
            checker = MemberChecker(max_unpacked_bytes=max_unpacked_bytes)
            writer = _TreeWriter(str(target), read_only=read_only)
            for member in members(data):
                writer.add(checker.check(member.info), member)
            info = _read_to_the_end(checker, data, raw)
        if sha256 is not None and info.sha256 != sha256:
            raise BundleHashMismatch(f"the archive's bytes hash to {info.sha256}, not to {sha256}")
    except BaseException:
        _remove_tree(target)
        raise
    return info


class _TreeWriter:
    """Creates what the checker let through, below directories it made itself, in archive order, in
    the unpacking thread. Writer threads (two, one per directory) were measured slower: on two cores
    the unpacking thread only waits for the decoder, and every file handed to another thread cost
    GIL hand-offs (a 100 MB, 1,822-file bundle: 0.22 s here against 0.27 s with two writers)."""

    def __init__(self, target: str, *, read_only: bool) -> None:
        self.target = target
        self.made = {""}
        self.write_bits = 0 if read_only else 0o200

    def add(self, name: str, member: Member) -> None:
        info = member.info
        _make_dirs(self.target, posixpath.dirname(name), self.made)
        path = os.path.join(self.target, name)
        if info.isdir():
            _make_dirs(self.target, name, self.made)
        elif info.issym():
            os.symlink(info.linkname, path)
        elif info.islnk():
            os.link(os.path.join(self.target, posixpath.normpath(info.linkname)), path, follow_symlinks=False)
        else:
            fd = _create(path, (0o555 if info.mode & 0o100 else 0o444) | self.write_bits)
            try:
                for piece in member.chunks():
                    _write_all(fd, piece)
            finally:
                os.close(fd)


def _create(path: str, mode: int) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data):]


def _make_dirs(target: str | Path, relative: str, made: set[str]) -> None:
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


def _remove_tree(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


"""The tar reader of every archive that is read (the server checking an upload, a node unpacking a
download as it arrives): headers, pax records and GNU long names parsed by hand from the decoder's
chunks, member data handed on as memoryviews of those chunks.

Why not tarfile (with tarfile.data_filter): its stream mode ('r|', the only one for a source that
cannot seek) copies its whole buffer for every header it reads; most of the time of a 100 MB unpack
went there (bench_bundle), and the node's preparation is on the critical path of every launch. It
also reads a pax header or GNU long name whole into memory, whatever size the archive claims; here
they are bounded (_MAX_EXTENDED, _MAX_EXTENDED_TOTAL). And data_filter would add nothing: the rules
it applies (absolute paths, leaving the target, links out, device files) are checks.py's already,
with more beside (hard links only to earlier files, duplicates, sparse files, a member count and an
unpacked size limit), and unpacking.py creates every file O_EXCL|O_NOFOLLOW below directories it
made itself. The parsing still defers to tarfile wherever it matters: anything but a plain POSIX
ustar header (GNU or v7 headers, base-256 numbers, a signed or wrong checksum, old GNU sparse
members) goes to tarfile.TarInfo.frombuf, so numbers, checksums and ustar prefixes mean what they
mean to tarfile (tests/workers/test_bundles.py compares the two on every header shape). This
module only splits the archive into members; what a member may be is checks.py's (MemberChecker),
and nothing here writes a file.
"""

from __future__ import annotations

import re
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from .checks import MAX_TRAILING, BundleError, size_text, unreadable
from .decoding import PROGRESS_EVERY

_BLOCK = tarfile.BLOCKSIZE
_NUL_BLOCK = bytes(_BLOCK)
_NAME_ENCODING = "utf-8"
_NAME_ERRORS = "surrogateescape"
# A pax header or GNU long name is a few hundred bytes; these bound what a hostile one may cost.
_MAX_EXTENDED = 1 << 20
_MAX_EXTENDED_TOTAL = 16 << 20
_PAX_RECORD = re.compile(rb"(\d+) ([^=]+)=")
_EXTENDED_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
                   tarfile.GNUTYPE_LONGLINK)


class Chunks(Protocol):
    """Where the tar bytes come from (decoding.Decoder): the next chunk, b"" at the end; `progress`
    is called while it waits."""

    def next(self, progress: Callable[[], None]) -> bytes: ...


def _nothing() -> None:
    pass


class TarBytes:
    """The decompressed archive as the tar parser consumes it. Headers come out as bytes; member data
    as memoryviews of the decoder's own chunks, never copied into one growing buffer."""

    def __init__(self, decoder: Chunks, progress: Callable[[], None] | None) -> None:
        self.decoder = decoder
        self.progress = progress or _nothing
        self.next_progress = time.monotonic() + PROGRESS_EVERY
        self.buf = b""
        self.pos = 0
        self.ended = False

    def _more(self) -> bool:
        if self.ended:
            return False
        if (now := time.monotonic()) >= self.next_progress:
            self.next_progress = now + PROGRESS_EVERY
            self.progress()
        chunk = self.decoder.next(self.progress)
        if not chunk:
            self.ended = True
            return False
        rest = len(self.buf) - self.pos
        # Only the tail of a header split across two chunks is ever copied.
        self.buf = self.buf[self.pos:] + chunk if rest else chunk
        self.pos = 0
        return True

    def take(self, size: int) -> bytes:
        """`size` bytes, or fewer at the end of the archive."""
        while len(self.buf) - self.pos < size:
            if not self._more():
                break
        data = self.buf[self.pos:self.pos + size]
        self.pos += len(data)
        return data

    def piece(self, limit: int) -> memoryview:
        """The next bytes available, at most `limit` of them; BundleError at the end of the archive."""
        if self.pos == len(self.buf) and not self._more():
            raise unreadable("it ends inside a member")
        end = min(len(self.buf), self.pos + limit)
        view = memoryview(self.buf)[self.pos:end]
        self.pos = end
        return view

    def skip(self, size: int) -> None:
        while size:
            size -= len(self.piece(size))

    def drain(self) -> None:
        """Read what follows the end-of-archive blocks (record padding) to the end, so that the hash
        covers every byte; more than padding is refused."""
        trailing = len(self.buf) - self.pos
        self.pos = len(self.buf)
        while self._more():
            trailing += len(self.buf)
            self.pos = len(self.buf)
            if trailing > MAX_TRAILING:
                raise BundleError(f"has more than {size_text(MAX_TRAILING)} after the end of its tar archive")


@dataclass
class Member:
    """A member as the checker sees it (`info`), and its data, read at most once."""

    info: tarfile.TarInfo
    data: TarBytes
    left: int
    padding: int

    def chunks(self) -> Iterator[memoryview]:
        while self.left:
            piece = self.data.piece(self.left)
            self.left -= len(piece)
            yield piece

    def finish(self) -> None:
        self.data.skip(self.left + self.padding)
        self.left = self.padding = 0


def _nts(body: bytes) -> str:
    """A NUL-terminated name (a GNU long name's data)."""
    return body.split(b"\0", 1)[0].decode(_NAME_ENCODING, _NAME_ERRORS)


def _pax_records(body: bytes) -> dict[str, str]:
    """The records of a pax extended header: `<length> <keyword>=<value>\\n`, UTF-8."""
    records: dict[str, str] = {}
    pos = 0
    while pos < len(body) and body[pos] != 0:
        match = _PAX_RECORD.match(body, pos)
        length = int(match.group(1)) if match else 0
        if not match or length <= 0 or pos + length > len(body) or body[pos + length - 1:pos + length] != b"\n":
            raise unreadable("a malformed pax header")
        keyword = match.group(2).decode(_NAME_ENCODING, _NAME_ERRORS)
        records[keyword] = body[match.end():pos + length - 1].decode(_NAME_ENCODING, _NAME_ERRORS)
        pos += length
    return records


_nti: Callable[[bytes], int] = tarfile.nti  # type: ignore[attr-defined]  # tarfile's own number reader
_USTAR_MAGIC = tarfile.POSIX_MAGIC  # "ustar\0" then version "00": what pack_directory and most tools write


def parse_header(block: bytes) -> tarfile.TarInfo:
    """tarfile.TarInfo.frombuf, for the fields a bundle uses (name, mode, size, type, link), in half
    its time: a POSIX ustar header with octal numbers and an unsigned checksum is read here; anything
    else (GNU or v7 headers, base-256 numbers, a signed or wrong checksum, old GNU sparse members)
    goes to frombuf itself, which decides. On two cores the unpacking thread's Python time is the
    decoder's wait for the GIL: 1,822 headers were 0.05 s of it."""
    if (block[257:265] != _USTAR_MAGIC or block[156:157] == tarfile.GNUTYPE_SPARSE
            or any(block[i] & 0x80 for i in (100, 124, 148))):
        return tarfile.TarInfo.frombuf(block, _NAME_ENCODING, _NAME_ERRORS)
    try:
        checksum = _nti(block[148:156])
    except tarfile.HeaderError:
        checksum = -1
    if checksum != sum(block) - sum(block[148:156]) + 8 * 32:  # the field counts as eight spaces
        return tarfile.TarInfo.frombuf(block, _NAME_ENCODING, _NAME_ERRORS)
    info = tarfile.TarInfo(_nts(block[0:100]))
    info.mode = _nti(block[100:108])
    info.size = _nti(block[124:136])
    info.chksum = checksum
    info.type = block[156:157]
    info.linkname = _nts(block[157:257])
    prefix = _nts(block[345:500])
    # As frombuf: a v7 directory is a regular file whose name ends in "/"; the prefix joins the name.
    if info.type == tarfile.AREGTYPE and info.name.endswith("/"):
        info.type = tarfile.DIRTYPE
    if info.isdir():
        info.name = info.name.rstrip("/")
    if prefix and info.type not in tarfile.GNU_TYPES:
        info.name = prefix + "/" + info.name
    return info


def members(data: TarBytes) -> Iterator[Member]:
    """Each member of the archive in order, with pax headers (local and global) and GNU long names
    applied to it as tarfile applies them; sparse members are refused (never in a bundle)."""
    global_pax: dict[str, str] = {}
    pax: dict[str, str] = {}
    long_name: str | None = None
    long_link: str | None = None
    extended = 0
    block = data.take(_BLOCK)
    if not block:
        raise unreadable("it is empty")
    while True:
        if not block or block == _NUL_BLOCK:
            return  # the end-of-archive block, or the end of the data without one (tar accepts both)
        try:
            info = parse_header(block)
        except tarfile.HeaderError as exc:
            raise unreadable(exc) from None
        if info.size < 0:
            raise unreadable(f"a negative size in the header of {info.name!r}")
        if info.type in _EXTENDED_TYPES:
            extended += info.size
            if info.size > _MAX_EXTENDED or extended > _MAX_EXTENDED_TOTAL:
                raise unreadable(f"an extended header of {size_text(info.size)}")
            padded = info.size + (-info.size) % _BLOCK
            body = data.take(padded)
            if len(body) < padded:
                raise unreadable("it ends inside a header")
            body = body[:info.size]
            if info.type == tarfile.GNUTYPE_LONGNAME:
                long_name = _nts(body)
            elif info.type == tarfile.GNUTYPE_LONGLINK:
                long_link = _nts(body)
            elif info.type == tarfile.XGLTYPE:
                global_pax.update(_pax_records(body))
            else:
                pax.update(_pax_records(body))
            block = data.take(_BLOCK)
            continue
        fields = {**global_pax, **pax}
        if info.type == tarfile.GNUTYPE_SPARSE or any(key.startswith("GNU.sparse.") for key in fields):
            raise BundleError("is a sparse file", fields.get("path") or long_name or info.name)
        if "path" in fields:
            info.name = fields["path"].rstrip("/")
        if long_name is not None:
            info.name = long_name
        if "linkpath" in fields:
            info.linkname = fields["linkpath"]
        if long_link is not None:
            info.linkname = long_link
        if "size" in fields:
            try:
                info.size = int(fields["size"])
            except ValueError:
                info.size = -1
            if info.size < 0:
                raise unreadable(f"a pax size of {fields['size']!r}")
        if info.isdir():
            info.name = info.name.rstrip("/")
        pax, long_name, long_link = {}, None, None
        # Data follows regular members and, as tarfile reads them, members of an unknown type.
        size = info.size if info.isreg() or info.type not in tarfile.SUPPORTED_TYPES else 0
        member = Member(info, data, size, (-size) % _BLOCK)
        yield member
        member.finish()
        block = data.take(_BLOCK)


"""The archive's bytes as they arrive (a file, an HTTP response, an S3 body), hashed and counted
(`RawSource`), decompressed whatever the compression (zstd, gzip or plain; bzip2 and xz too, as
tarfile read them) on a thread of its own (`Decoder`), the compression-bomb check applied to every
megabyte it produces. tar.py parses what comes out.
"""

from __future__ import annotations

import bz2
import contextlib
import gzip
import hashlib
import lzma
import queue
import threading
from collections.abc import Callable
from typing import Any, Protocol

from .checks import MAX_TRAILING, BundleError, check_ratio, size_text, unreadable
from .hashing import CHUNK, InOrder

ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
END = b""
_QUEUED_CHUNKS = 8  # decompressed megabytes the decoder may run ahead of the unpacking
PROGRESS_EVERY = 0.25  # seconds between two calls of an unpacking's `progress` (heartbeats, stop checks)


class Readable(Protocol):
    """What an archive is read from: a file, an HTTP response, an S3 body."""

    def read(self, size: int = -1, /) -> bytes: ...


class BundleReadError(OSError):
    """Reading the archive's own bytes failed (the network, the disk, an S3 body): not the archive's
    fault, so never a BundleError. The original exception is its __cause__."""


class SourceFailed(Exception):
    """Carries a failure of the source through the decoder thread to the caller."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class RawSource:
    """The archive's bytes as they arrive, hashed (sha256 of every byte) and counted (the compressed
    size, for the ratio check), with the few bytes read to recognise the format put back in front."""

    def __init__(self, fileobj: Readable, *, hashing: bool) -> None:
        self.fileobj = fileobj
        self.digest = hashlib.sha256() if hashing else None
        # Hashed beside the decompression, not before it in the decoder's thread.
        self.hashing = InOrder(self.digest.update, name="bundle-digest", queued=_QUEUED_CHUNKS) \
            if self.digest is not None else None
        self.count = 0
        self.head = b""

    def peek(self, size: int) -> bytes:
        while len(self.head) < size:
            data = self._read_raw(size - len(self.head))
            if not data:
                break
            self.head += data
        return self.head[:size]

    def _read_raw(self, size: int) -> bytes:
        try:
            data = self.fileobj.read(size)
        except Exception as exc:
            raise SourceFailed(exc) from exc
        if data:
            if self.hashing is not None:
                self.hashing.put(data)
            self.count += len(data)
        return data

    def sha256(self) -> str:
        """The hex sha256 of every byte read (waits for the hashing thread; call once); "" unhashed."""
        if self.hashing is None or self.digest is None:
            return ""
        self.hashing.finish()
        return self.digest.hexdigest()

    def abandon(self) -> None:
        if self.hashing is not None:
            self.hashing.abandon()

    def read(self, size: int = -1) -> bytes:
        if self.head:
            data, self.head = (self.head, b"") if size < 0 or size >= len(self.head) else \
                (self.head[:size], self.head[size:])
            return data
        return self._read_raw(size if size > 0 else CHUNK)

    def readable(self) -> bool:
        return True


def decompressed(raw: RawSource) -> Any:
    """A reader of the tar bytes inside `raw`, whichever compression it has (by its magic bytes)."""
    head = raw.peek(6)
    source: Any = raw  # file-like enough for every decompressor: read(size)
    if head[:4] == ZSTD_MAGIC:
        import zstandard

        # A bounded window: a crafted frame cannot make the decompressor allocate gigabytes.
        return zstandard.ZstdDecompressor(max_window_size=1 << 27).stream_reader(
            source, read_size=CHUNK, read_across_frames=True)
    if head[:2] == b"\x1f\x8b":
        return gzip.GzipFile(fileobj=source, mode="rb")
    if head[:3] == b"BZh":
        return bz2.BZ2File(source)
    if head[:6] == b"\xfd7zXZ\x00":
        return lzma.LZMAFile(source)
    return raw


class Decoder:
    """Reads and decompresses the archive in a thread of its own, a megabyte at a time (the raw
    bytes' sha256 on another, RawSource.hashing), while the caller parses and writes what came before: zstd
    and the socket or disk release the GIL, so they overlap on two cores. It checks the compression
    ratio on the bytes it actually produced, so a bomb stops at the first implausible megabyte
    whatever its headers claim, and it never runs more than _QUEUED_CHUNKS ahead. Its failures
    reach the caller in order."""

    def __init__(self, raw: RawSource, *, max_ratio: float | None) -> None:
        self.raw = raw
        self.max_ratio = max_ratio
        self.total = 0
        self.chunks: queue.Queue[bytes | BaseException] = queue.Queue(maxsize=_QUEUED_CHUNKS)
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, name="bundle-decoder", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        try:
            stream = decompressed(self.raw)
            while not self.stopping.is_set():
                try:
                    chunk = stream.read(CHUNK)
                except SourceFailed:
                    raise
                except Exception as exc:  # zstd, gzip, bz2 and xz each raise their own kinds
                    raise unreadable(exc) from None
                if not chunk:
                    break
                self.total += len(chunk)
                check_ratio(self.total, self.raw.count, self.max_ratio)
                self._put(chunk)
            # The hash covers every byte, even past the end of the compressed stream.
            extra = 0
            while extra <= MAX_TRAILING and (data := self.raw.read(CHUNK)):
                extra += len(data)
            if extra > MAX_TRAILING:
                raise BundleError(f"has more than {size_text(MAX_TRAILING)} after the end of its compressed stream")
            self._put(END)
        except BaseException as exc:
            self._put(exc)

    def _put(self, item: bytes | BaseException) -> None:
        while not self.stopping.is_set():
            try:
                self.chunks.put(item, timeout=0.2)
                return
            except queue.Full:
                continue

    def next(self, progress: Callable[[], None]) -> bytes:
        while True:
            try:
                item = self.chunks.get(timeout=PROGRESS_EVERY)
                break
            except queue.Empty:
                progress()  # a slow network: the node still heartbeats, and a stop still stops it
        if isinstance(item, BaseException):
            raise item
        return item

    def stop(self) -> None:
        """Ends the thread; one still blocked in a read of the source is left to its daemon fate (it
        only ever reads, and only from the source)."""
        self.stopping.set()
        with contextlib.suppress(queue.Empty):
            while True:
                self.chunks.get_nowait()
        self.thread.join(timeout=2.0)
        self.raw.abandon()


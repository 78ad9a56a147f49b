"""sha256 in the same pass as the I/O: while writing a file, and straight from the page cache
(a read-only mapping, nothing copied) when verifying one."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import mmap
import os
import sys
from concurrent.futures import ThreadPoolExecutor
from typing import BinaryIO

# Large writes are cut into pieces so that hashing piece k (on the writer's helper thread; hashlib
# releases the GIL) runs while piece k+1 is written. Small pieces keep the pipeline full even though
# it has to drain at the end of every write() call.
PIECE_BYTES = 2 << 20
# Start the disk writing every this many bytes instead of leaving it all to the final fsync.
WRITEBACK_BYTES = 32 << 20
_SYNC_FILE_RANGE_WRITE = 2


def _load_sync_file_range():
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    fn.argtypes = (ctypes.c_int, ctypes.c_longlong, ctypes.c_longlong, ctypes.c_uint)
    fn.restype = ctypes.c_int
    return fn


_sync_file_range = _load_sync_file_range()


def _bytes_view(data) -> memoryview:
    view = memoryview(data)
    if view.format != "B" or view.ndim != 1:
        view = view.cast("B")
    return view


class HashingWriter:
    """A write-only file object that forwards to ``raw`` and keeps the sha256 and size of all bytes.

    Each writer has its own helper thread (started on the first large write, ended by
    ``hexdigest()``), so files written side by side (torch.distributed.checkpoint's writer threads)
    are hashed side by side too.
    """

    def __init__(self, raw: BinaryIO, writeback_fd: int | None = None) -> None:
        self._raw = raw
        self._sha = hashlib.sha256()
        self._helper: ThreadPoolExecutor | None = None
        self.size = 0
        # With a file descriptor, writeback of what is written starts early (Linux
        # sync_file_range, asynchronous), so the final fsync has little left to wait for.
        self._writeback_fd = writeback_fd if _sync_file_range is not None else None
        self._writeback_done = 0

    def write(self, data) -> int:
        view = _bytes_view(data)
        n = view.nbytes
        if n <= PIECE_BYTES:
            self._sha.update(view)
            self._raw.write(view)
        else:
            if self._helper is None:
                # One worker: the pieces are hashed strictly in the order they were written.
                self._helper = ThreadPoolExecutor(max_workers=1, thread_name_prefix="torchyard-sha256")
            futures = []
            for start in range(0, n, PIECE_BYTES):
                piece = view[start : start + PIECE_BYTES]
                futures.append(self._helper.submit(self._sha.update, piece))
                self._raw.write(piece)
            # ``data`` may be a view of memory only valid during this call: finish hashing it now.
            for future in futures:
                future.result()
        self.size += n
        if self._writeback_fd is not None and self.size - self._writeback_done >= WRITEBACK_BYTES:
            self._raw.flush()
            _sync_file_range(
                self._writeback_fd,
                self._writeback_done,
                self.size - self._writeback_done,
                _SYNC_FILE_RANGE_WRITE,
            )
            self._writeback_done = self.size
        return n

    def flush(self) -> None:
        self._raw.flush()

    def hexdigest(self) -> str:
        """The sha256 of everything written; call it once the writing is over."""
        if self._helper is not None:
            self._helper.shutdown()
            self._helper = None
        return self._sha.hexdigest()


def skip_torch_crc32():
    """torch.save's zip CRC32 costs a full extra pass over the bytes; our sha256 already covers them."""
    try:
        from torch.utils.serialization import config as serialization_config

        return serialization_config.patch({"save.compute_crc32": False})
    except (ImportError, AttributeError):
        return contextlib.nullcontext()


class HashedFile:
    """A file opened for writing whose bytes are hashed on the way (HashingWriter), with the
    tell/fileno/flush/close that torch.distributed.checkpoint's writer uses."""

    def __init__(self, fh: BinaryIO) -> None:
        self._fh = fh
        self.hashing = HashingWriter(fh, writeback_fd=fh.fileno())

    def write(self, data) -> int:
        return self.hashing.write(data)

    def writable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._fh.tell()

    def fileno(self) -> int:
        return self._fh.fileno()

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


def hash_file(path: str) -> tuple[int, str]:
    """(size, sha256 hex) of a file, hashed from a read-only mapping of it: the page cache is
    read in place, never copied, and torch.load(mmap=True) or a reader that follows finds the
    same pages there."""
    sha = hashlib.sha256()
    with open(path, "rb", buffering=0) as fh:
        size = os.fstat(fh.fileno()).st_size
        if size == 0:  # an empty file cannot be mapped
            return 0, sha.hexdigest()
        with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mapped:
            view = memoryview(mapped)
            try:
                for start in range(0, size, PIECE_BYTES * 8):
                    sha.update(view[start : start + PIECE_BYTES * 8])
            finally:
                view.release()
    return size, sha.hexdigest()

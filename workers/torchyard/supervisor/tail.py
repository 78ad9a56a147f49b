"""Follow log files as they grow and hand back whole lines.

torchrun (`--log-dir D --redirects 3`) writes one stdout and one stderr file per local rank under
`D/<rdzv_id>_<random>/attempt_<n>/<local_rank>/`; the folder appears only once workers start, so the
tailer globs until it has seen every expected file.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

# A line longer than this is cut (a progress bar without newlines must not grow memory or events).
MAX_LINE_BYTES = 16 * 1024
# Bound the work of one monitor iteration when a rank floods its output; the rest is read next time.
MAX_READ_BYTES = 4 * 1024 * 1024
# The last read after the writer is gone takes what is left, up to this much.
MAX_FINAL_READ_BYTES = 64 * 1024 * 1024
# A read for at most N lines reads about N times this many bytes (what is not needed is unread).
BYTES_PER_LINE_GUESS = 256
Stream = Literal["stdout", "stderr"]
STREAMS: tuple[Stream, Stream] = ("stdout", "stderr")


class FileTail:
    """Reads the lines appended to one file since the last call; the file may not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: BinaryIO | None = None
        self._partial = b""
        self.at_end = True  # the last read reached the end of the file (or there is no file yet)

    def read_lines(self, final: bool = False, max_lines: int | None = None) -> list[str]:
        """New complete lines, at most max_lines (the rest stays in the file for the next call);
        with final=True also the unterminated last line (the writer is gone)."""
        if max_lines is not None and max_lines <= 0:
            self.at_end = False  # not known: nothing was read
            return []
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 - kept open across calls
            except FileNotFoundError:
                return []
        limit = MAX_FINAL_READ_BYTES if final else MAX_READ_BYTES
        if max_lines is not None:
            limit = min(limit, max(BYTES_PER_LINE_GUESS * max_lines, 64 * 1024))
        data = self._file.read(limit)
        self.at_end = len(data) < limit
        if not data and not (final and self._partial):
            return []
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if max_lines is not None and len(chunks) > max_lines:
            # Unread again: the bytes after the kept lines all came from this read (the first
            # chunk, which holds the earlier partial line, is always kept).
            self._file.seek(-sum(len(c) + 1 for c in chunks[max_lines:]) - len(self._partial), os.SEEK_CUR)
            del chunks[max_lines:]
            self._partial = b""
            self.at_end = False
        if final and self._partial and self.at_end:
            chunks.append(self._partial)
            self._partial = b""
        while len(self._partial) > MAX_LINE_BYTES:
            chunks.append(self._partial[:MAX_LINE_BYTES])
            self._partial = self._partial[MAX_LINE_BYTES:]
        return [_decode(chunk[:MAX_LINE_BYTES]) for chunk in chunks]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


@dataclass(frozen=True)
class RankLine:
    local_rank: int
    stream: Stream
    line: str


class RankLogTailer:
    """Tails every local rank's stdout and stderr files under one torchrun --log-dir."""

    def __init__(self, log_dir: Path, nproc_per_node: int) -> None:
        self.log_dir = Path(log_dir)
        self.nproc_per_node = nproc_per_node
        # A reused run directory may hold folders of an earlier torchrun: never replay those.
        self._ignored = {p.name for p in self.log_dir.iterdir()} if self.log_dir.is_dir() else set()
        self._tails: dict[tuple[int, Stream], FileTail] = {}

    def _discover(self) -> None:
        if len(self._tails) >= 2 * self.nproc_per_node or not self.log_dir.is_dir():
            return
        for path in sorted(self.log_dir.glob("*/attempt_*/*/*.log")):
            run_folder = path.relative_to(self.log_dir).parts[0]
            local_rank = path.parent.name
            stream = next((s for s in STREAMS if s == path.stem), None)
            if run_folder in self._ignored or not local_rank.isdigit() or stream is None:
                continue
            key = (int(local_rank), stream)
            if key not in self._tails:
                self._tails[key] = FileTail(path)

    @property
    def at_end(self) -> bool:
        """Every file was read to its end by the last poll."""
        return all(tail.at_end for tail in self._tails.values())

    def poll(self, final: bool = False, max_lines: int | None = None) -> list[RankLine]:
        """Lines written since the last poll, file by file (each file's lines stay in order), at
        most max_lines in all: the rest is read by a later poll. Each file may first take an equal
        share, then what the others left: a flooding rank cannot hold back the others' lines."""
        self._discover()
        lines: list[RankLine] = []
        tails = sorted(self._tails.items())
        if max_lines is None or not tails:
            for (local_rank, stream), tail in tails:
                lines.extend(RankLine(local_rank, stream, text) for text in tail.read_lines(final=final))
            return lines
        share = max(1, max_lines // len(tails))
        for first_pass in (True, False):
            for (local_rank, stream), tail in tails:
                left = max_lines - len(lines)
                if left <= 0:
                    return lines
                if first_pass or not tail.at_end:
                    budget = min(share, left) if first_pass else left
                    lines.extend(RankLine(local_rank, stream, text)
                                 for text in tail.read_lines(final=final, max_lines=budget))
        return lines

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()

"""Follow log files as they grow and hand back whole lines.

torchrun (`--log-dir D --redirects 3`) writes one stdout and one stderr file per local rank under
`D/<rdzv_id>_<random>/attempt_<n>/<local_rank>/`; the folder appears only once workers start, so the
tailer globs until it has seen every expected file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# A line longer than this is cut (a progress bar without newlines must not grow memory or events).
MAX_LINE_BYTES = 16 * 1024
# Bound the work of one monitor iteration when a rank floods its output; the rest is read next time.
MAX_READ_BYTES = 4 * 1024 * 1024
# The last read after the writer is gone takes what is left, up to this much.
MAX_FINAL_READ_BYTES = 64 * 1024 * 1024
STREAMS = ("stdout", "stderr")


class FileTail:
    """Reads the lines appended to one file since the last call; the file may not exist yet."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._file: BinaryIO | None = None
        self._partial = b""

    def read_lines(self, final: bool = False) -> list[str]:
        """New complete lines; with final=True also the unterminated last line (the writer is gone)."""
        if self._file is None:
            try:
                self._file = open(self.path, "rb")  # noqa: SIM115 - kept open across calls
            except FileNotFoundError:
                return []
        data = self._file.read(MAX_FINAL_READ_BYTES if final else MAX_READ_BYTES)
        if not data and not (final and self._partial):
            return []
        chunks = (self._partial + data).split(b"\n")
        self._partial = chunks.pop()
        if final and self._partial:
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
    stream: str  # "stdout" or "stderr"
    line: str


class RankLogTailer:
    """Tails every local rank's stdout and stderr files under one torchrun --log-dir."""

    def __init__(self, log_dir: Path, nproc_per_node: int) -> None:
        self.log_dir = Path(log_dir)
        self.nproc_per_node = nproc_per_node
        # A reused run directory may hold folders of an earlier torchrun: never replay those.
        self._ignored = {p.name for p in self.log_dir.iterdir()} if self.log_dir.is_dir() else set()
        self._tails: dict[tuple[int, str], FileTail] = {}

    def _discover(self) -> None:
        if len(self._tails) >= 2 * self.nproc_per_node or not self.log_dir.is_dir():
            return
        for path in sorted(self.log_dir.glob("*/attempt_*/*/*.log")):
            run_folder = path.relative_to(self.log_dir).parts[0]
            local_rank, stream = path.parent.name, path.stem
            if run_folder in self._ignored or not local_rank.isdigit() or stream not in STREAMS:
                continue
            key = (int(local_rank), stream)
            if key not in self._tails:
                self._tails[key] = FileTail(path)

    def poll(self, final: bool = False) -> list[RankLine]:
        """Lines written since the last poll, file by file (each file's lines stay in order)."""
        self._discover()
        lines: list[RankLine] = []
        for (local_rank, stream), tail in sorted(self._tails.items()):
            lines.extend(RankLine(local_rank, stream, text) for text in tail.read_lines(final=final))
        return lines

    def close(self) -> None:
        for tail in self._tails.values():
            tail.close()

"""The Python exception a node's ranks failed with, as their rank_main left it (RUN_DIR/error-<rank>.json):
the first one raised on the node, by the files' times. A rank that failed only because another one
did (its collective broken) raised later; the one that started it comes first."""

from __future__ import annotations

import json
from pathlib import Path

from torchyard import protocol
from torchyard.stream_contract import RankError


def first_error(run_dir: Path) -> RankError | None:
    found = []
    for path in run_dir.glob(f"{protocol.ERROR_PREFIX}*.json"):
        try:
            error = json.loads(path.read_text())
            found.append((path.stat().st_mtime_ns, int(error["rank"]), error))
        except (OSError, ValueError, KeyError, TypeError):
            continue  # half written, or not ours: the node reports without it
    if not found:
        return None
    _, _, error = min(found, key=lambda item: item[:2])
    return {"type": str(error.get("type") or ""), "message": str(error.get("message") or ""),
            "frame": str(error.get("frame") or ""), "rank": int(error["rank"]),
            "step": error["step"] if isinstance(error.get("step"), int) else None}

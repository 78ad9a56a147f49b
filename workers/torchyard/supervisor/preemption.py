"""Lossless preemption, the node's side: watch for the request, enforce its grace, tell a yield apart.

The agent writes protocol.PREEMPT_FILE into the run directory ({"grace", "reason", "at"}, with
node/preemption.py); the ranks read the same file through the SDK and checkpoint and yield
(sdk/preemption.py). The supervisor only keeps time: once `grace` seconds have passed since it
first saw the request and the ranks still run, it stops the node, but never while a checkpoint is
being committed (a rank inside sdk.preemption.committing(), or a staging folder of a save in
progress in a local store): it waits for the commit to end, for at most one more grace. A rank
that yielded leaves YIELDED_FILE behind, which makes the node's end a yield rather than a failure.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import cast
from urllib.parse import urlparse

from torchyard import protocol

# The staging folders of saves in progress in a local store (sdk/checkpoint/stores.py STAGING_PREFIX).
STAGING_PREFIX = ".tmp-"
DEFAULT_GRACE = 120.0


@dataclass
class PreemptionNote:
    """What the monitor loop should do now: say `line` (if any), and stop the node when `stop`."""

    line: str = ""
    stop: bool = False


class PreemptionWatch:
    def __init__(self, run_dir: Path, checkpoint_url: str = "") -> None:
        self.run_dir = Path(run_dir)
        self.request_file = self.run_dir / protocol.PREEMPT_FILE
        parsed = urlparse(checkpoint_url or "")
        self.local_store = Path(parsed.path) if parsed.scheme == "file" and parsed.path else None
        self.seen_at: float | None = None
        self.request: protocol.PreemptRequest = {}
        self.stopped_for_grace = False
        self._waiting_for_commit = False
        self._next_look = 0.0

    @property
    def requested(self) -> bool:
        return self.seen_at is not None

    @property
    def grace(self) -> float:
        value = self.request.get("grace")
        return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0 \
            else DEFAULT_GRACE

    def poll(self, now: float) -> PreemptionNote:
        """Called every loop while the ranks run (at most one stat every 0.2 s)."""
        if now < self._next_look or self.stopped_for_grace:
            return PreemptionNote()
        self._next_look = now + 0.2
        if self.seen_at is None:
            if not self.request_file.exists():
                return PreemptionNote()
            self.seen_at = now
            try:
                loaded = json.loads(self.request_file.read_text())
                # As the agent wrote it (node/preemption.py): each field is read defensively.
                self.request = cast("protocol.PreemptRequest", loaded) if isinstance(loaded, dict) else {}
            except (OSError, ValueError):
                self.request = {}
            why = self.request.get("reason") or "a job of higher priority needs this node's GPUs"
            return PreemptionNote(f"preemption requested ({why}); the ranks have {self.grace:g} s to checkpoint "
                                  "and yield")
        if now - self.seen_at < self.grace:
            return PreemptionNote()
        if self.committing() and now - self.seen_at < 2 * self.grace:
            if not self._waiting_for_commit:
                self._waiting_for_commit = True
                return PreemptionNote(f"the ranks did not yield within {self.grace:g} s, but a checkpoint is being "
                                      "committed; waiting for the commit to end before stopping them")
            return PreemptionNote()
        self.stopped_for_grace = True
        return PreemptionNote(f"the ranks did not yield within the preemption grace of {self.grace:g} s; stopping "
                              "them (the job resumes from its last committed checkpoint)", stop=True)

    def committing(self) -> bool:
        """A rank is inside a save (its marker), or a local store holds a save's staging folder."""
        try:
            if any(name.startswith(protocol.COMMITTING_PREFIX) for name in os.listdir(self.run_dir)):
                return True
        except OSError:
            pass
        if self.local_store is not None:
            try:
                return any(name.startswith(STAGING_PREFIX) for name in os.listdir(self.local_store))
            except OSError:
                return False
        return False

    def yielded(self) -> protocol.Yielded | None:
        """What the ranks that yielded wrote ({"rank", "step", "ts"} of the last one), None when none did."""
        path = self.run_dir / protocol.YIELDED_FILE
        try:
            lines = path.read_text().splitlines()
        except OSError:
            return None
        for line in reversed(lines):
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                return cast("protocol.Yielded", value)  # as the rank wrote it (sdk.yield_for_preemption)
        return {} if lines else None

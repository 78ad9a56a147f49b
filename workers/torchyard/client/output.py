"""Printing through rich without surprises: user text (log lines, paths, reasons) is never read as
markup, never highlighted and never wrapped, so a pipe gets exactly the characters a terminal shows."""

from __future__ import annotations

from typing import TypedDict

from rich.console import Console
from rich.text import Text

from torchyard.bundles import size_text

__all__ = ["JobShown", "say", "size_text"]


class JobProgressShown(TypedDict, total=False):
    step: int | None
    total_steps: int | None


class JobShown(TypedDict, total=False):
    """What a job's line shows of the REST schema's JobSummaryOut (GET /api/jobs) or JobDetailOut
    (what a submit, a stop or a change of priority answers)."""

    id: int
    name: str
    status: str
    world_size: int | None
    progress: JobProgressShown


def say(console: Console, text: str | Text, style: str = "") -> None:
    """Print one line of plain text (or a styled Text) as it is."""
    console.print(text if isinstance(text, Text) else Text(text, style=style), soft_wrap=True)


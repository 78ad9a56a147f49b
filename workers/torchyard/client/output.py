"""Printing through rich without surprises: user text (log lines, paths, reasons) is never read as
markup, never highlighted and never wrapped, so a pipe gets exactly the characters a terminal shows."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text


def say(console: Console, text: str | Text, style: str = "") -> None:
    """Print one line of plain text (or a styled Text) as it is."""
    console.print(text if isinstance(text, Text) else Text(text, style=style), soft_wrap=True)


def size_text(size: int) -> str:
    """A byte count for people: 512 B, 12.3 kB, 4.5 MB, 1.2 GB."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} B"

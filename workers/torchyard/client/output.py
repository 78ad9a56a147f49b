"""Printing through rich without surprises: user text (log lines, paths, reasons) is never read as
markup, never highlighted and never wrapped, so a pipe gets exactly the characters a terminal shows."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from torchyard.bundles import size_text

__all__ = ["say", "size_text"]


def say(console: Console, text: str | Text, style: str = "") -> None:
    """Print one line of plain text (or a styled Text) as it is."""
    console.print(text if isinstance(text, Text) else Text(text, style=style), soft_wrap=True)


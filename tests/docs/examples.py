"""The shell and Python examples of the documentation (README.md and docs/), and their markers.

Every ```bash, ```console, ```sh and ```python block says, on the line above it (blank lines
between are fine), either that a test runs it or why none does:

    <!-- run: NAME -->           tests/integration/test_docs_examples.py runs it against a real stack
    <!-- not-run: REASON -->     it is not run, and REASON says why (needs a GPU, starts a server, ...)

The unit test (tests/docs/test_docs_examples.py) fails on a block with neither."""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
README = ROOT / "README.md"
# Languages a reader would paste into a shell or a Python file: each such block is run or says why not.
CHECKED = frozenset({"bash", "console", "sh", "shell", "python", "py"})
RUNNABLE = frozenset({"bash", "sh", "python"})

RUN = re.compile(r"^<!--\s*run:\s*(?P<name>[a-z0-9][a-z0-9-]*)\s*-->$")
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(?P<reason>.*?)\s*-->$")
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})\s*(?P<language>[\w+-]*)")


@dataclass(frozen=True)
class Example:
    path: str  # relative to the repository
    line: int  # of the opening fence, 1-based
    language: str  # "" when the fence names none
    text: str  # dedented by the fence's own indentation
    marker: str  # the line above the fence, stripped

    @property
    def run(self) -> str | None:
        match = RUN.match(self.marker)
        return match.group("name") if match else None

    @property
    def reason(self) -> str | None:
        match = NOT_RUN.match(self.marker)
        return match.group("reason") if match else None

    @property
    def where(self) -> str:
        return f"{self.path}:{self.line}"


def documents() -> list[Path]:
    """README.md and every page of the site (not the hooks that build it)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.relative_to(DOCS).parts)
    return [README, *pages]


def examples_in(path: Path) -> list[Example]:
    lines = path.read_text().splitlines()
    found: list[Example] = []
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        fence, indent = opening.group("fence"), opening.group("indent")
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        above = index - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        body = "\n".join(line[len(indent):] if line.startswith(indent) else line for line in lines[index + 1:end])
        found.append(Example(
            path=str(path.relative_to(ROOT)), line=index + 1, language=opening.group("language").lower(),
            text=textwrap.dedent(body) + "\n", marker=lines[above].strip() if above >= 0 else ""))
        index = end + 1
    return found


def examples() -> list[Example]:
    return [example for path in documents() for example in examples_in(path)]

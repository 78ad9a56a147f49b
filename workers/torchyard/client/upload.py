"""A project directory shipped to the server as a content-addressed bundle.

The bundle's sha256 names it, so the CLI asks the server first (`HEAD /api/bundles/{sha256}`) and
uploads only what it does not have: an unchanged project costs one request.
"""

from __future__ import annotations

import contextlib
import posixpath
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)
from rich.text import Text

from torchyard.bundles import ARCHIVE_SUFFIX, BundleError, PackedBundle, pack_directory

from . import CliError
from .http import ApiClient
from .output import say, size_text


def _pack(directory: Path, dest: Path, max_bytes: int, console: Console) -> PackedBundle:
    spinner = console.status(Text(f"packing {directory}")) if console.is_terminal else contextlib.nullcontext()
    with spinner:
        try:
            return pack_directory(directory, dest, max_unpacked_bytes=max_bytes)
        except BundleError as exc:
            raise CliError(f"{directory}: {exc}") from None
        except OSError as exc:
            raise CliError(f"cannot pack {directory}: {exc}") from None


def push_bundle(api: ApiClient, packed: PackedBundle, console: Console, *, what: str = "code") -> None:
    """Upload a packed bundle unless the server already holds it (`what` names it in the messages
    and is the upload's kind: code, or a function's payload)."""
    short = f"{packed.sha256[:8]}…"
    path = f"/api/bundles/{packed.sha256}"
    if api.exists(path):
        say(console, f"{what} unchanged: bundle {short} already on the server")
        return
    started = time.monotonic()
    columns = (TextColumn(f"uploading {what} bundle {short}"), BarColumn(), DownloadColumn(), TransferSpeedColumn(),
               TimeRemainingColumn())
    # A progress bar is for people: a pipe gets the one summary line below instead.
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("upload", total=packed.size)
        api.put_file(f"{path}?kind={what}", packed.path, lambda sent: progress.advance(task, sent))
    elapsed = max(time.monotonic() - started, 1e-6)
    say(console, f"uploaded {what} bundle {short}: {size_text(packed.size)} in {elapsed:.1f}s "
                 f"({size_text(int(packed.size / elapsed))}/s)")


def upload_project(api: ApiClient, directory: Path, console: Console, *, entrypoint: str | None = None) -> str:
    """Pack `directory` (its .gitignore and .torchyardignore respected) within the server's size
    limit, upload it unless the server already holds it for this user, and return its sha256.
    An `entrypoint` that the ignore files leave out is refused here, before anything is sent."""
    max_bytes = int(api.call("GET", "/api/bundles/limits")["max_bytes"])
    with tempfile.TemporaryDirectory(prefix="torchyard-bundle-") as tmp:
        packed = _pack(directory, Path(tmp) / f"bundle{ARCHIVE_SUFFIX}", max_bytes, console)
        if entrypoint is not None and posixpath.normpath(entrypoint) not in packed.files:
            raise CliError(f"{entrypoint} is left out of the bundle by .gitignore or .torchyardignore "
                           f"in {directory}; the job could not run it")
        say(console, f"packed {len(packed.files)} file(s) from {directory}: {size_text(packed.unpacked_size)}, "
                     f"{size_text(packed.size)} compressed")
        push_bundle(api, packed, console)
        return packed.sha256

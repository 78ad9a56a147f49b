"""A job's artifacts (what its nodes wrote under $TORCHYARD_OUTPUT_DIR): listed, or downloaded into
`DIR/attempt-<a>/node-<r>/<path>` with every file's sha256 checked.

The paths come from the server, which got them from the nodes: a path that would land outside DIR
(absolute, `..`, through a symlink already in DIR) is refused, never written.
"""

from __future__ import annotations

import hashlib
import http.client
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypedDict

from rich import box
from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn
from rich.table import Table
from rich.text import Text

from torchyard.bundles import sha256_file

from . import CliError
from .http import ApiClient
from .output import say, size_text

CHUNK = 1 << 20


class Artifact(TypedDict):
    """A file a job's node collected (the REST schema's ArtifactOut)."""

    id: int
    attempt: int
    node_rank: int
    path: str
    size: int
    sha256: str
    created_at: str


def artifact_destination(root: Path, artifact: Artifact) -> Path:
    """Where an artifact goes under `root`: attempt-<a>/node-<r>/<path>. Raises CliError for a path
    that is absolute, climbs out with `..`, or resolves outside `root`."""
    path = str(artifact.get("path") or "")
    try:
        folder = f"attempt-{int(artifact['attempt'])}/node-{int(artifact['node_rank'])}"
    except (KeyError, TypeError, ValueError):
        raise CliError(f"artifact {path!r}: the server gave no attempt and node rank") from None
    # "" and "." parts are no harm on their own, but no real output path has them: refusing them
    # keeps every destination a file under its own node's folder.
    if path.startswith("/") or "\x00" in path or set(path.split("/")) & {"", ".", ".."}:
        raise CliError(f"artifact {path!r}: refused, the path would leave {root}")
    base = root.resolve()
    dest = (base / folder / path).resolve()
    if not dest.is_relative_to(base / folder):  # a symlink already in DIR leads elsewhere
        raise CliError(f"artifact {path!r}: refused, the path would leave {root}")
    return dest


def artifacts_table(job_id: int, artifacts: list[Artifact]) -> Table:
    """The artifacts as a table: id, attempt, node, size, sha256 (short), path."""
    table = Table(title=f"job {job_id}: {len(artifacts)} artifact(s)", box=box.SIMPLE, title_justify="left")
    for header in ("id", "attempt", "node", "size"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("sha256", no_wrap=True)
    table.add_column("path", overflow="fold")
    for artifact in artifacts:
        # Text cells: a path is shown as it is, never read as rich markup.
        table.add_row(*(Text(str(value)) for value in (
            artifact.get("id"), artifact.get("attempt"), artifact.get("node_rank"),
            size_text(int(artifact.get("size") or 0)), str(artifact.get("sha256") or "")[:12], artifact.get("path"))))
    return table


@dataclass
class DownloadSummary:
    downloaded: int = 0
    skipped: int = 0  # already in DIR with the right sha256
    bytes: int = 0


def _fetch(api: ApiClient, job_id: int, artifact: Artifact, dest: Path, progress: Progress,
           task: Any) -> None:
    """Stream one artifact into `dest` through a `.part` file, renamed once its sha256 checks out."""
    partial = dest.with_name(dest.name + ".part")
    digest = hashlib.sha256()
    try:
        with api.download(f"/api/jobs/{job_id}/artifacts/{artifact['id']}") as response, open(partial, "wb") as out:
            while block := response.read(CHUNK):
                digest.update(block)
                out.write(block)
                progress.advance(task, len(block))
    except BaseException as exc:  # Ctrl-C too: never leave a half file behind
        partial.unlink(missing_ok=True)
        if isinstance(exc, OSError | http.client.HTTPException):
            raise CliError(f"{artifact['path']}: download failed: {exc}") from None
        raise
    if digest.hexdigest() != artifact.get("sha256"):
        partial.unlink(missing_ok=True)
        raise CliError(f"{artifact['path']} (attempt {artifact['attempt']}, node {artifact['node_rank']}): "
                       f"sha256 mismatch, expected {artifact.get('sha256')}, downloaded {digest.hexdigest()}")
    partial.replace(dest)


def download_artifacts(api: ApiClient, job_id: int, artifacts: list[Artifact], root: Path,
                       console: Console) -> DownloadSummary:
    """Download every artifact into `root` (files already there with the right sha256 are kept).
    Every destination is checked before the first byte is written."""
    targets = [(artifact, artifact_destination(root, artifact)) for artifact in artifacts]
    summary = DownloadSummary()
    columns = (TextColumn("downloading"), BarColumn(), DownloadColumn(), TransferSpeedColumn())
    total = sum(int(a.get("size") or 0) for a in artifacts)
    with Progress(*columns, console=console, disable=not console.is_terminal) as progress:
        task = progress.add_task("artifacts", total=total)
        for artifact, dest in targets:
            size = int(artifact.get("size") or 0)
            if dest.is_file() and dest.stat().st_size == size and sha256_file(dest) == artifact.get("sha256"):
                summary.skipped += 1
                progress.advance(task, size)
                continue
            try:
                dest.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise CliError(f"cannot create {dest.parent}: {exc}") from None
            _fetch(api, job_id, artifact, dest, progress, task)
            summary.downloaded += 1
            summary.bytes += size
    return summary


def show_or_download(api: ApiClient, job_id: int, out: Path | None, console: Console) -> int:
    """`torchyard artifacts JOB [--out DIR]`: the table, or the files and a summary line."""
    artifacts = api.call("GET", f"/api/jobs/{job_id}/artifacts") or []
    if not artifacts:
        say(console, f"job {job_id} has no artifacts")
        return 0
    if out is None:
        console.print(artifacts_table(job_id, artifacts), soft_wrap=False)
        return 0
    summary = download_artifacts(api, job_id, artifacts, out, console)
    kept = f", {summary.skipped} already there" if summary.skipped else ""
    say(console, f"downloaded {summary.downloaded} file(s), {size_text(summary.bytes)}, into {out}{kept}")
    return 0

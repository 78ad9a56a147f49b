"""Collect a node's outputs (what it wrote under $TORCHYARD_OUTPUT_DIR) into the store as artifacts.

Files go to `<job's store folder>/artifacts/attempt-<a>/node-<r>/<path>`: each node's apart, so two
nodes writing `model.pt` keep both. Symlinks and special files are skipped: only what the job wrote.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from urllib.parse import unquote, urlparse

from torchyard.bundles import sha256_file
from torchyard.storage import s3_client
from torchyard.stream_contract import ArtifactFile


def upload_file(source: Path, uri: str) -> None:
    """Copy one file to `uri` (file:// or s3://), atomically on a filesystem."""
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        s3_client().upload_file(str(source), parsed.netloc, parsed.path.lstrip("/"))
        return
    target = Path(unquote(parsed.path)) if parsed.scheme == "file" else Path(uri)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    shutil.copyfile(source, tmp)
    os.replace(tmp, target)


def collect_outputs(output_dir: Path, destination: str) -> tuple[list[ArtifactFile], list[str]]:
    """Upload every regular file under output_dir below `destination` (a file:// or s3:// URL).

    Returns ([{"path", "size", "sha256", "uri"}], ["path: why it failed"])."""
    collected: list[ArtifactFile] = []
    failures: list[str] = []
    for root, dirs, files in os.walk(output_dir, followlinks=False):
        dirs.sort()
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink() or not path.is_file():
                continue
            relative = path.relative_to(output_dir).as_posix()
            uri = f"{destination.rstrip('/')}/{relative}"
            try:
                size, digest = path.stat().st_size, sha256_file(path)
                upload_file(path, uri)
            except Exception as exc:  # one unreadable file must not lose the others
                failures.append(f"{relative}: {exc}")
                continue
            collected.append({"path": relative, "size": size, "sha256": digest, "uri": uri})
    return collected, failures

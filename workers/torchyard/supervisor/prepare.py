"""What a node needs before torchrun starts, when it runs the user's own code: the bundle, fetched
once per machine into a cache and verified, a fresh working directory with its content, and a
virtual environment for its requirements, cached by what determines it.

Cache layout under the machine's cache folder (shared by every node of every job on the machine):

    bundles/<sha256>/            the unpacked bundle, read-only by convention
    bundles/<sha256>.ok          written once it is complete (a half-unpacked bundle has none)
    envs/<key>/                  a virtualenv: --system-site-packages, plus the training Python's
                                 own site-packages through a .pth, so its torch is reused
    envs/<key>.ok                written once pip succeeded

Concurrent nodes on one machine serialize on `<name>.lock` (flock): the first one does the work,
the others find the `.ok` marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from torchyard import bundles
from torchyard.protocol import NodeLaunch

REQUIREMENTS_FILE = "requirements.txt"
OK_SUFFIX = ".ok"
_CHUNK = 1 << 20


class PrepareError(RuntimeError):
    """Preparing the node failed; the message says why, for the job's failure reason."""


# --- locks ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def cache_lock(path: Path, *, wait: Callable[[], None]) -> Iterator[None]:
    """An exclusive flock on `path`, polled so that `wait` (heartbeats) runs while another node holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                wait()
                time.sleep(0.2)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def once_per_machine(folder: Path, name: str, label: str, build: Callable[[], None], *,
                     wait: Callable[[], None], say: Callable[[str], None]) -> None:
    """Run `build` unless `folder/name` is already complete (its `.ok` marker): the first node to
    need it builds it under the lock, the others wait and find it done."""
    marker = folder / f"{name}{OK_SUFFIX}"
    if not marker.exists():
        with cache_lock(folder / f"{name}.lock", wait=wait):
            if not marker.exists():
                build()
                marker.write_text(json.dumps({"built_at": time.time()}))
                return
    say(f"{label} is in this machine's cache")


# --- the bundle -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleSource:
    """Where a bundle comes from: the launch's `code` and the agent's way to the server."""

    code: dict[str, Any]
    server_url: str = ""
    machine_token: str = ""

    @classmethod
    def of(cls, launch: NodeLaunch) -> BundleSource:
        return cls(launch.code, launch.server_url, launch.machine_token)


def download_bundle(source: BundleSource, dest: Path) -> None:
    """Fetch the archive: straight from S3 when the store is S3, from the server with the machine's
    token otherwise (or from the store's directory when this machine can see it)."""
    uri = str(source.code.get("uri") or "")
    sha256 = source.code["bundle"]
    parsed = urlparse(uri)
    if parsed.scheme == "s3":
        from torchyard.sdk.checkpoint.stores import s3_client

        try:
            s3_client().download_file(parsed.netloc, parsed.path.lstrip("/"), str(dest))
            return
        except Exception as exc:  # boto3 raises many kinds; all mean the same here
            if not source.server_url:
                raise PrepareError(f"cannot fetch bundle {sha256[:12]} from {uri}: {exc}") from exc
    if source.server_url:
        headers = {"Authorization": f"Machine {source.machine_token}"}
        if source.code.get("grant"):  # warming a cache before any node of the job is placed here
            headers["X-Torchyard-Grant"] = str(source.code["grant"])
        request = urllib.request.Request(f"{source.server_url.rstrip('/')}/api/agent/bundles/{sha256}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response, open(dest, "wb") as out:
                shutil.copyfileobj(response, out, _CHUNK)
            return
        except (urllib.error.URLError, OSError) as exc:
            raise PrepareError(f"cannot fetch bundle {sha256[:12]} from {source.server_url}: {exc}") from exc
    if parsed.scheme == "file" and Path(unquote(parsed.path)).is_file():
        shutil.copyfile(unquote(parsed.path), dest)
        return
    raise PrepareError(
        f"cannot fetch bundle {sha256[:12]}: this agent was started without --server and cannot see {uri}"
    )


def cached_bundle(source: BundleSource, cache_dir: Path, *, wait: Callable[[], None],
                  say: Callable[[str], None]) -> Path:
    """The unpacked bundle in the machine's cache, fetched, verified and unpacked once."""
    sha256 = source.code["bundle"]
    root = cache_dir / "bundles"
    final = root / sha256

    def fetch_and_unpack() -> None:
        started = time.monotonic()
        archive = root / f".{sha256}.{os.getpid()}.part"
        try:
            download_bundle(source, archive)
            digest = bundles.sha256_file(archive)
            if digest != sha256:
                raise PrepareError(f"bundle {sha256[:12]} failed verification: its bytes hash to {digest[:12]}")
            fetched = time.monotonic()
            shutil.rmtree(final, ignore_errors=True)  # an earlier, interrupted unpack
            try:
                bundles.unpack(archive, final)
            except bundles.BundleError as exc:
                raise PrepareError(f"bundle {sha256[:12]} refused: {exc}") from exc
            size = archive.stat().st_size
        finally:
            with contextlib.suppress(FileNotFoundError):
                archive.unlink()
        say(f"fetched and unpacked code bundle {sha256[:12]} in {time.monotonic() - started:.2f}s "
            f"({bundles.size_text(size)} fetched and verified in {fetched - started:.2f}s)")

    once_per_machine(root, sha256, f"code bundle {sha256[:12]}", fetch_and_unpack, wait=wait, say=say)
    return final


def make_workdir(bundle_dir: Path, workdir: Path) -> Path:
    """A fresh, writable copy of the bundle for one node: nothing a job writes reaches the cache."""
    if workdir.exists():
        shutil.rmtree(workdir)
    shutil.copytree(bundle_dir, workdir, symlinks=True)
    return workdir


# --- the environment ------------------------------------------------------------------------------
def _local_paths(requirements: list[str], workdir: Path) -> list[Path]:
    """Files and folders a requirements list names by path (local packages, wheels, -r/-c files)."""
    found = []
    for line in requirements:
        line = line.split(" #", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        for token in shlex.split(line, comments=False, posix=True):
            token = token.removeprefix("file:")
            if token.startswith("-"):
                continue
            candidate = (workdir / token).resolve()
            if (token.startswith((".", "/")) or token.endswith((".whl", ".tar.gz", ".zip"))) and candidate.exists():
                found.append(candidate)
    return found


def _hash_path(digest, path: Path) -> None:
    if path.is_file():
        digest.update(str(path.name).encode())
        digest.update(bundles.sha256_file(path).encode())
        return
    for item in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(item.relative_to(path)).encode())
        digest.update(bundles.sha256_file(item).encode())


def requirements_for(workdir: Path, pip: list[str]) -> list[str]:
    """requirements.txt of the bundle (when present), then the spec's runtime.pip."""
    lines: list[str] = []
    path = workdir / REQUIREMENTS_FILE
    if path.is_file():
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    lines.extend(pip)
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def environment_key(python: str, requirements: list[str], workdir: Path) -> str:
    """Same interpreter, same requirements, same local packages: the same environment."""
    digest = hashlib.sha256()
    digest.update(os.path.realpath(python).encode())
    digest.update(b"\0".join(line.strip().encode() for line in requirements))
    nested: list[str] = []
    for path in _local_paths(requirements, workdir):
        if path.is_file() and path.suffix == ".txt":
            nested.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        _hash_path(digest, path)
    for path in _local_paths(nested, workdir):
        _hash_path(digest, path)
    return digest.hexdigest()[:24]


def site_packages(python: str) -> list[str]:
    """The site-packages folders of the training Python (its venv's too, which --system-site-packages
    alone would miss when that Python is itself a virtualenv)."""
    out = subprocess.run(
        [python, "-c", "import json, site, sys; print(json.dumps(site.getsitepackages() + [site.getusersitepackages()]))"],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return [p for p in json.loads(out.stdout) if os.path.isdir(p)]


def prepared_environment(
    python: str, requirements: list[str], workdir: Path, cache_dir: Path, *, pip: list[str],
    run: Callable[[list[str]], int], say: Callable[[str], None], wait: Callable[[], None],
    errors: Callable[[], list[str]],
) -> str:
    """The Python of a virtualenv holding `requirements` on top of `python`'s own packages, built
    once per machine for each environment_key(). `run` executes one command (never a shell) from
    `workdir`, so paths in requirements.txt mean what they mean to pip there; `errors` returns the
    error lines of the last command, for the failure reason."""
    key = environment_key(python, requirements, workdir)
    envs = cache_dir / "envs"
    env_dir = envs / key
    env_python = str(env_dir / "bin" / "python")

    def build() -> None:
        started = time.monotonic()
        shutil.rmtree(env_dir, ignore_errors=True)
        say(f"creating environment {key} for {len(requirements)} requirement(s)")
        code = run([python, "-m", "venv", "--system-site-packages", "--without-pip", str(env_dir)])
        if code != 0:
            raise PrepareError(f"could not create a virtualenv with {python} (exit {code})")
        site_dirs = sorted(env_dir.glob("lib/python*/site-packages"))
        if site_dirs:
            # The training Python's own packages (its torch above all) stay importable, after ours.
            (site_dirs[0] / "_torchyard_parent_env.pth").write_text("\n".join(site_packages(python)) + "\n")
        # pip runs from the agent's own install (`--python` targets the new environment), so the
        # environment needs no pip of its own and is created in a fraction of a second.
        argv = [sys.executable, "-m", "pip", "--python", env_python, "install", "--disable-pip-version-check",
                "--no-input", "--progress-bar", "off"]
        if (workdir / REQUIREMENTS_FILE).is_file():
            argv += ["-r", REQUIREMENTS_FILE]
        code = run(argv + list(pip))
        if code != 0:
            shutil.rmtree(env_dir, ignore_errors=True)
            found = errors()
            raise PrepareError(f"installing the requirements failed: {found[-1] if found else f'pip exited with code {code}'}")
        say(f"environment {key} ready in {time.monotonic() - started:.1f}s")

    once_per_machine(envs, key, f"environment {key}", build, wait=wait, say=say)
    return env_python

"""A node's Python environment: a virtual environment for the requirements of the user's code,
built once per machine and cached by what determines it (environment_key).

Layout under the machine's cache folder (beside bundles/, torchyard.bundles.cache's):

    envs/<key>/                  a virtualenv: --system-site-packages, plus the training Python's
                                 own site-packages through a .pth, so its torch is reused
    envs/<key>.ok                written once pip succeeded
    envs/paths/<digest>          remembered content hashes of local packages (`-e .`, `./pkg`) that a
                                 bundle's requirements name, per bundle: a bundle's bytes never change

Concurrent nodes on one machine serialize on `envs/<key>.lock` (flock, bundles.cache.cache_lock): the
first one builds, the others find the `.ok` marker. The supervisor builds a node's environment; the
agent warms a machine's caches ahead of a job the same way (agent/warm.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from torchyard.bundles import sha256_file
from torchyard.bundles.cache import OK_SUFFIX, PrepareError, cache_lock, write_atomically

REQUIREMENTS_FILE = "requirements.txt"


def once_per_machine(folder: Path, name: str, label: str, build: Callable[[], None], *,
                     wait: Callable[[], None], say: Callable[[str], None],
                     valid: Callable[[], bool] = lambda: True) -> None:
    """Run `build` unless `folder/name` is already complete (its `.ok` marker, and `valid()`): the
    first node to need it builds it under the lock, the others wait and find it done."""
    marker = folder / f"{name}{OK_SUFFIX}"
    if not (marker.exists() and valid()):
        with cache_lock(folder / f"{name}.lock", wait=wait):
            if not (marker.exists() and valid()):
                with contextlib.suppress(FileNotFoundError):
                    marker.unlink()
                build()
                write_atomically(marker, json.dumps({"built_at": time.time()}))
                return
    say(f"{label} is in this machine's cache")


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
        digest.update(sha256_file(path).encode())
        return
    for item in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(str(item.relative_to(path)).encode())
        digest.update(sha256_file(item).encode())


def _path_digest(path: Path, workdir: Path, bundle: str | None, memo_dir: Path | None) -> str:
    """The content hash of a local package or file. One inside a fresh copy of a bundle has the
    content that bundle gave it, so its hash is remembered per (bundle, path) and never computed
    twice on a machine (`-e .` would otherwise hash the whole project on every launch)."""
    root = workdir.resolve()
    memo = None
    if bundle and memo_dir is not None and path.is_relative_to(root):
        name = hashlib.sha256(f"{bundle}\0{path.relative_to(root).as_posix()}".encode()).hexdigest()[:32]
        memo = memo_dir / name
        with contextlib.suppress(OSError, UnicodeDecodeError):
            remembered = memo.read_text(encoding="utf-8").strip()
            if len(remembered) == 64:
                return remembered
    digest = hashlib.sha256()
    _hash_path(digest, path)
    value = digest.hexdigest()
    if memo is not None:
        memo.parent.mkdir(parents=True, exist_ok=True)
        write_atomically(memo, value)
    return value


def interpreter_identity(python: str) -> str:
    """The interpreter an environment is built on, as far as that environment cares: its real path,
    and the size, mtime and inode of that file (a Python upgraded in place is another Python)."""
    real = os.path.realpath(python)
    try:
        found = os.stat(real)
    except OSError:
        return real
    return f"{real}:{found.st_size}:{found.st_mtime_ns}:{found.st_ino}"


def requirements_for(workdir: Path, pip: list[str]) -> list[str]:
    """requirements.txt of the bundle (when present), then the spec's runtime.pip."""
    lines: list[str] = []
    path = workdir / REQUIREMENTS_FILE
    if path.is_file():
        lines.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
    lines.extend(pip)
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def environment_key(python: str, requirements: list[str], workdir: Path, *, bundle: str | None = None,
                    cache_dir: Path | None = None) -> str:
    """Same interpreter, same requirements, same local packages: the same environment. With `bundle`
    (the sha256 of the bundle `workdir` is a fresh copy of) and `cache_dir`, the hashes of local
    packages inside the bundle are remembered there: a second launch computes the key by reading a
    few small files, not the project."""
    memo_dir = cache_dir / "envs" / "paths" if cache_dir is not None else None
    digest = hashlib.sha256()
    digest.update(interpreter_identity(python).encode())
    digest.update(b"\0".join(line.strip().encode() for line in requirements))
    nested: list[str] = []
    for path in _local_paths(requirements, workdir):
        if path.is_file() and path.suffix == ".txt":
            nested.extend(path.read_text(encoding="utf-8", errors="replace").splitlines())
        digest.update(_path_digest(path, workdir, bundle, memo_dir).encode())
    for path in _local_paths(nested, workdir):
        digest.update(_path_digest(path, workdir, bundle, memo_dir).encode())
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
    errors: Callable[[], list[str]], bundle: str | None = None,
) -> str:
    """The Python of a virtualenv holding `requirements` on top of `python`'s own packages, built
    once per machine for each environment_key(). `run` executes one command (never a shell) from
    `workdir`, so paths in requirements.txt mean what they mean to pip there; `errors` returns the
    error lines of the last command, for the failure reason. `bundle`: the sha256 of the bundle
    `workdir` was just copied from, so local packages are hashed once per bundle and machine.

    A cached environment is checked without running anything: its key (interpreter identity,
    requirement lines, local packages' content), its `.ok` marker and its interpreter's presence."""
    key = environment_key(python, requirements, workdir, bundle=bundle, cache_dir=cache_dir)
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

    once_per_machine(envs, key, f"environment {key}", build, wait=wait, say=say,
                     valid=lambda: os.path.exists(env_python))
    return env_python


def lacks_module(python: str, module: str) -> bool:
    """True when the node's training Python cannot import `module` (a launcher's own package: ray,
    accelerate), so the node fails at once, saying what to install, rather than in every rank."""
    code = f"import importlib.util,sys; sys.exit(importlib.util.find_spec({module!r}) is None)"
    try:
        return subprocess.run([python, "-c", code], stdin=subprocess.DEVNULL, capture_output=True,
                              timeout=60).returncode != 0
    except (OSError, subprocess.TimeoutExpired):
        return True

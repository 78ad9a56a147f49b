"""What a node needs before torchrun starts, when it runs the user's own code: the bundle, fetched
once per machine into a cache and verified, a fresh working directory with its content, and a
virtual environment for its requirements, cached by what determines it.

Cache layout under the machine's cache folder (shared by every node of every job on the machine):

    bundles/<sha256>/            the unpacked bundle; its files read-only, never written after commit
    bundles/<sha256>.ok          its manifest (workdir.Manifest: every file's size, mtime, ctime and
                                 inode, every directory and link), written once the entry is complete
                                 and its archive's sha256 matched; a half-unpacked bundle has none
    bundles/.<sha256>.<pid>.tmp  an entry being unpacked, renamed into place only once verified
    envs/<key>/                  a virtualenv: --system-site-packages, plus the training Python's
                                 own site-packages through a .pth, so its torch is reused
    envs/<key>.ok                written once pip succeeded
    envs/paths/<digest>          remembered content hashes of local packages (`-e .`, `./pkg`) that a
                                 bundle's requirements name, per bundle: a bundle's bytes never change

A bundle is fetched as a stream: its bytes are hashed, decompressed, checked member by member and
written as they arrive (bundles.unpack_stream), into a temporary directory renamed into place only
when the last byte hashed to the sha256 asked for. A second node verifies the entry by lstat against
the manifest (milliseconds; a touched entry is fetched again) and copies it (workdir.py: clones
where the filesystem has copy-on-write, in-kernel copies otherwise, never hard links).

Concurrent nodes on one machine serialize on `<name>.lock` (flock): whoever builds an entry holds it
exclusively, nodes that verify and copy a bundle entry hold it shared (so an entry is never replaced
under a copy); the first one does the work, the others find the `.ok` marker.
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
from typing import IO, Any
from urllib.parse import unquote, urlparse

from torchyard import bundles, tls
from torchyard.protocol import NodeLaunch
from torchyard.storage import s3_client

from . import workdir as workdirs

REQUIREMENTS_FILE = "requirements.txt"
OK_SUFFIX = ".ok"
_CHUNK = 1 << 20


class PrepareError(RuntimeError):
    """Preparing the node failed; the message says why, for the job's failure reason."""


# --- locks ----------------------------------------------------------------------------------------
@contextlib.contextmanager
def cache_lock(path: Path, *, wait: Callable[[], None], shared: bool = False) -> Iterator[None]:
    """An flock on `path` (exclusive, or `shared`), polled so that `wait` (heartbeats) runs while
    another node holds it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+b") as handle:
        while True:
            try:
                fcntl.flock(handle, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                wait()
                time.sleep(0.05)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


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
                _write_atomically(marker, json.dumps({"built_at": time.time()}))
                return
    say(f"{label} is in this machine's cache")


# --- the bundle -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleSource:
    """Where a bundle comes from: the launch's `code` and the agent's way to the server."""

    code: dict[str, Any]
    server_url: str = ""
    machine_token: str = ""
    # A function's payload is judged by its size alone (bundles.PAYLOAD_RATIO).
    max_ratio: float | None = bundles.MAX_RATIO

    @classmethod
    def of(cls, launch: NodeLaunch) -> BundleSource:
        return cls(launch.code, launch.server_url, launch.machine_token)


def _openers(source: BundleSource) -> list[tuple[str, Callable[[], Any]]]:
    """The ways to this bundle's bytes, in the order to try them: straight from S3 when the store is
    S3, from the server with the machine's token, from the store's directory when this machine sees it
    and knows no server. Each opener returns a context manager giving a readable binary stream."""
    uri = str(source.code.get("uri") or "")
    sha256 = source.code["bundle"]
    parsed = urlparse(uri)
    ways: list[tuple[str, Callable[[], Any]]] = []
    if parsed.scheme == "s3":
        def from_s3() -> Any:
            body = s3_client().get_object(Bucket=parsed.netloc, Key=parsed.path.lstrip("/"))["Body"]
            return contextlib.closing(body)

        ways.append((uri, from_s3))
    if source.server_url:
        def from_server() -> Any:
            headers = {"Authorization": f"Machine {source.machine_token}"}
            if source.code.get("grant"):  # warming a cache before any node of the job is placed here
                headers["X-Torchyard-Grant"] = str(source.code["grant"])
            request = urllib.request.Request(f"{source.server_url.rstrip('/')}/api/agent/bundles/{sha256}",
                                             headers=headers)
            # TORCHYARD_CA_FILE: the agent's --ca-file, for a server whose HTTPS a private authority signs.
            return urllib.request.urlopen(request, timeout=60,
                                          context=tls.https_context(os.environ.get("TORCHYARD_CA_FILE")))

        ways.append((source.server_url, from_server))
    elif parsed.scheme == "file" and Path(unquote(parsed.path)).is_file():
        ways.append((uri, lambda: open(unquote(parsed.path), "rb")))  # noqa: SIM115 (a context manager)
    if not ways:
        raise PrepareError(
            f"cannot fetch bundle {sha256[:12]}: this agent was started without --server and cannot see {uri}"
        )
    return ways


@contextlib.contextmanager
def open_bundle(source: BundleSource) -> Iterator[tuple[IO[bytes], str]]:
    """The bundle's archive as a stream, and where it comes from (for messages)."""
    sha256 = source.code["bundle"]
    ways = _openers(source)
    for index, (where, opener) in enumerate(ways):
        try:
            stream = opener()
        except Exception as exc:  # boto3 and urllib raise many kinds; all mean the same here
            if index + 1 < len(ways):
                continue
            raise PrepareError(f"cannot fetch bundle {sha256[:12]} from {where}: {exc}") from exc
        with stream as body:
            yield body, where
        return


class _Received:
    """The download as unpack_stream reads it: counted against its announced length (http.client
    takes a connection closed early for the end of the body, which would read as a truncated or
    forged archive instead of the network failure it is) and timed (whether the network or the
    unpacking set the pace of a streamed fetch is then in the node's log)."""

    def __init__(self, body: IO[bytes]) -> None:
        self.body = body
        headers = getattr(body, "headers", None)
        length = headers.get("Content-Length") if headers is not None else None
        self.expected = int(length) if length and length.isdigit() else None
        self.count = 0
        self.started = time.monotonic()
        self.ended: float | None = None

    def read(self, size: int = -1) -> bytes:
        data = self.body.read(size)
        self.count += len(data)
        if not data and self.ended is None:
            self.ended = time.monotonic()
            if self.expected is not None and self.count < self.expected:
                raise ConnectionError(f"the connection closed after {self.count} of {self.expected} bytes")
        return data


def _fetch_into(source: BundleSource, target: Path, *, read_only: bool,
                wait: Callable[[], None]) -> tuple[bundles.BundleInfo, str, float]:
    """Stream the bundle into `target` (which must not exist): hashed, checked and unpacked at once;
    nothing is left of `target` unless the bytes hashed to the bundle's sha256. Returns what was
    unpacked, where from, and how long the bytes took to arrive. `wait` runs all along (heartbeats:
    a long download must not look like a lost node)."""
    sha256 = source.code["bundle"]
    with open_bundle(source) as (body, where):
        received = _Received(body)
        try:
            info = bundles.unpack_stream(received, target, sha256=sha256, read_only=read_only, progress=wait,
                                         max_ratio=source.max_ratio)
            return info, where, (received.ended or time.monotonic()) - received.started
        except bundles.BundleHashMismatch:
            raise PrepareError(f"bundle {sha256[:12]} failed verification: its bytes do not hash to it") from None
        except bundles.BundleError as exc:
            raise PrepareError(f"bundle {sha256[:12]} refused: {exc}") from exc
        except bundles.BundleReadError as exc:
            raise PrepareError(f"cannot fetch bundle {sha256[:12]} from {where}: {exc.__cause__ or exc}") from exc
        except OSError as exc:
            raise PrepareError(f"cannot unpack bundle {sha256[:12]} into this machine's cache: {exc}") from exc


class _Cache:
    """One bundle's entry in the machine's cache: `root/<sha256>/` and its manifest `root/<sha256>.ok`."""

    def __init__(self, cache_dir: Path, sha256: str) -> None:
        self.sha256 = sha256
        self.root = cache_dir / "bundles"
        self.final = self.root / sha256
        self.marker = self.root / f"{sha256}{OK_SUFFIX}"
        self.lock = self.root / f"{sha256}.lock"

    def check(self) -> tuple[workdirs.Manifest | None, str]:
        """(the manifest, "") for a sound entry; (None, why not) otherwise ("" when there is none)."""
        manifest = workdirs.Manifest.load(self.marker)
        if manifest is None:
            return None, "was left without a manifest by an older version" if self.marker.exists() else ""
        if manifest.sha256 != self.sha256:
            return None, "has a manifest naming another bundle"
        problem = workdirs.verify(self.final, manifest)
        return (None, f"changed since it was unpacked ({problem})") if problem else (manifest, "")

    def build(self, source: BundleSource, say: Callable[[str], None], why: str,
              wait: Callable[[], None]) -> workdirs.Manifest:
        """Fetch and commit the entry; the caller holds the exclusive lock."""
        label = self.sha256[:12]
        if why:
            say(f"code bundle {label} in this machine's cache {why}: fetching it again")
        # Uncommitted first: from here on no node takes what is left for sound.
        with contextlib.suppress(FileNotFoundError):
            self.marker.unlink()
        for leftover in [self.final, *self.root.glob(f".{self.sha256}.*.tmp")]:
            _remove(leftover)
        started = time.monotonic()
        temporary = self.root / f".{self.sha256}.{os.getpid()}.tmp"
        info, where, received = _fetch_into(source, temporary, read_only=True, wait=wait)
        try:
            manifest = workdirs.record(temporary, info, sha256=self.sha256, built_at=time.time())
            os.rename(temporary, self.final)
        except BaseException:
            _remove(temporary)
            raise
        _write_atomically(self.marker, manifest.to_json())
        say(f"fetched and unpacked code bundle {label} in {time.monotonic() - started:.2f}s "
            f"({bundles.size_text(info.compressed_size)} from {where}, its last byte after {received:.2f}s; "
            f"{len(info.files)} files, hashed, checked and unpacked as they arrived)")
        return manifest


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def cached_bundle(source: BundleSource, cache_dir: Path, *, wait: Callable[[], None],
                  say: Callable[[str], None]) -> Path:
    """The unpacked bundle in the machine's cache: fetched, verified and unpacked once; on later uses
    verified by lstat against its manifest, and fetched again when anything in it changed."""
    entry = _Cache(cache_dir, source.code["bundle"])
    with cache_lock(entry.lock, wait=wait, shared=True):
        manifest, why = entry.check()
    if manifest is None:
        with cache_lock(entry.lock, wait=wait):
            manifest, why = entry.check()  # another node may have built it meanwhile
            if manifest is None:
                entry.build(source, say, why, wait)
                return entry.final
    say(f"code bundle {entry.sha256[:12]} is in this machine's cache (verified by stat: {len(manifest.files)} files)")
    return entry.final


def make_workdir(bundle_dir: Path, workdir: Path, *, wait: Callable[[], None] = lambda: None,
                 say: Callable[[str], None] | None = None) -> Path:
    """A fresh, writable copy of the bundle for one node, sharing no inode with the cache: nothing a
    job writes reaches it. A cache entry is copied under its shared lock, each file checked against
    the manifest as it is copied (PrepareError if the entry changed since cached_bundle verified it);
    any other directory is copied as it is."""
    bundle_dir = Path(bundle_dir)
    if workdir.exists():
        shutil.rmtree(workdir)
    marker = bundle_dir.with_name(bundle_dir.name + OK_SUFFIX)
    if not marker.exists():
        workdirs.copy_plain_tree(bundle_dir, workdir)
        return workdir
    started = time.monotonic()
    with cache_lock(bundle_dir.with_name(bundle_dir.name + ".lock"), wait=wait, shared=True):
        manifest = workdirs.Manifest.load(marker)
        if manifest is None:
            raise PrepareError(f"code bundle {bundle_dir.name[:12]} in this machine's cache has no readable manifest")
        try:
            copied = workdirs.copy_tree(bundle_dir, manifest, workdir, progress=wait)
        except workdirs.StaleEntry as exc:
            raise PrepareError(f"code bundle {bundle_dir.name[:12]} changed in this machine's cache ({exc}); "
                               f"the next attempt fetches it again") from None
    if say is not None:
        say(_workdir_line(bundle_dir.name, copied, time.monotonic() - started))
    return workdir


def _workdir_line(sha256: str, copied: workdirs.CopyResult, elapsed: float) -> str:
    return (f"working directory from code bundle {sha256[:12]} in {elapsed:.2f}s "
            f"({copied.files} files, {bundles.size_text(copied.size)}: {copied.method})")


def bundle_workdir(source: BundleSource, cache_dir: Path, workdir: Path, *, wait: Callable[[], None],
                   say: Callable[[str], None]) -> Path:
    """cached_bundle() then make_workdir() as one step, the way a node should call them: the entry is
    verified and copied under one shared lock, and an entry found changed while it is copied is
    fetched again instead of failing the node."""
    entry = _Cache(cache_dir, source.code["bundle"])
    built = False
    why = ""
    for _ in range(3):
        if workdir.exists():
            shutil.rmtree(workdir)
        with cache_lock(entry.lock, wait=wait, shared=True):
            manifest, why = entry.check()
            if manifest is not None:
                started = time.monotonic()
                try:
                    copied = workdirs.copy_tree(entry.final, manifest, workdir, progress=wait)
                except workdirs.StaleEntry as exc:
                    why = str(exc)
                else:
                    if not built:
                        say(f"code bundle {entry.sha256[:12]} is in this machine's cache "
                            f"(verified by stat: {len(manifest.files)} files)")
                    say(_workdir_line(entry.sha256, copied, time.monotonic() - started))
                    return workdir
        with cache_lock(entry.lock, wait=wait):
            manifest, found = entry.check()  # another node may have rebuilt it meanwhile
            if manifest is None:
                entry.build(source, say, found, wait)
                built = True
    raise PrepareError(f"code bundle {entry.sha256[:12]} keeps changing in this machine's cache: {why}")


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
        _write_atomically(memo, value)
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

"""The machine's bundle cache: a bundle fetched once per machine, verified, and copied into each
node's fresh working directory.

Layout under the machine's cache folder (shared by every node of every job on the machine; envs/,
the environments of the bundles' requirements, is torchyard.node.environments'):

    bundles/<sha256>/            the unpacked bundle; its files read-only, never written after commit
    bundles/<sha256>.ok          its manifest (manifest.Manifest: every file's size, mtime, ctime and
                                 inode, every directory and link), written once the entry is complete
                                 and its archive's sha256 matched; a half-unpacked bundle has none
    bundles/.<sha256>.<pid>.tmp  an entry being unpacked, renamed into place only once verified

A bundle is fetched as a stream: its bytes are hashed, decompressed, checked member by member and
written as they arrive (unpacking.unpack_stream), into a temporary directory renamed into place only
when the last byte hashed to the sha256 asked for. A second node verifies the entry by lstat against
the manifest (milliseconds; a touched entry is fetched again) and copies it (workdirs.py: clones
where the filesystem has copy-on-write, in-kernel copies otherwise, never hard links).

Concurrent nodes on one machine serialize on `<name>.lock` (flock): whoever builds an entry holds it
exclusively, nodes that verify and copy a bundle entry hold it shared (so an entry is never replaced
under a copy); the first one does the work, the others find the `.ok` marker.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any
from urllib.parse import unquote, urlparse

from torchyard import tls
from torchyard.protocol import BundleRef, NodeLaunch
from torchyard.storage import s3_client

from .checks import MAX_RATIO, BundleError, BundleHashMismatch, BundleInfo, size_text
from .decoding import BundleReadError
from .manifest import Manifest, record, verify
from .unpacking import unpack_stream
from .workdirs import CopyResult, StaleEntry, copy_plain_tree, copy_tree

OK_SUFFIX = ".ok"

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


def write_atomically(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, path)


# --- the bundle -----------------------------------------------------------------------------------
@dataclass(frozen=True)
class BundleSource:
    """Where a bundle comes from: the launch's `code` and the agent's way to the server."""

    code: BundleRef
    server_url: str = ""
    machine_token: str = ""
    # A function's payload is judged by its size alone (checks.PAYLOAD_RATIO).
    max_ratio: float | None = MAX_RATIO

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
                wait: Callable[[], None]) -> tuple[BundleInfo, str, float]:
    """Stream the bundle into `target` (which must not exist): hashed, checked and unpacked at once;
    nothing is left of `target` unless the bytes hashed to the bundle's sha256. Returns what was
    unpacked, where from, and how long the bytes took to arrive. `wait` runs all along (heartbeats:
    a long download must not look like a lost node)."""
    sha256 = source.code["bundle"]
    with open_bundle(source) as (body, where):
        received = _Received(body)
        try:
            info = unpack_stream(received, target, sha256=sha256, read_only=read_only, progress=wait,
                                         max_ratio=source.max_ratio)
            return info, where, (received.ended or time.monotonic()) - received.started
        except BundleHashMismatch:
            raise PrepareError(f"bundle {sha256[:12]} failed verification: its bytes do not hash to it") from None
        except BundleError as exc:
            raise PrepareError(f"bundle {sha256[:12]} refused: {exc}") from exc
        except BundleReadError as exc:
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

    def check(self) -> tuple[Manifest | None, str]:
        """(the manifest, "") for a sound entry; (None, why not) otherwise ("" when there is none)."""
        manifest = Manifest.load(self.marker)
        if manifest is None:
            return None, "was left without a manifest by an older version" if self.marker.exists() else ""
        if manifest.sha256 != self.sha256:
            return None, "has a manifest naming another bundle"
        problem = verify(self.final, manifest)
        return (None, f"changed since it was unpacked ({problem})") if problem else (manifest, "")

    def build(self, source: BundleSource, say: Callable[[str], None], why: str,
              wait: Callable[[], None]) -> Manifest:
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
            manifest = record(temporary, info, sha256=self.sha256, built_at=time.time())
            os.rename(temporary, self.final)
        except BaseException:
            _remove(temporary)
            raise
        write_atomically(self.marker, manifest.to_json())
        say(f"fetched and unpacked code bundle {label} in {time.monotonic() - started:.2f}s "
            f"({size_text(info.compressed_size)} from {where}, its last byte after {received:.2f}s; "
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
        copy_plain_tree(bundle_dir, workdir)
        return workdir
    started = time.monotonic()
    with cache_lock(bundle_dir.with_name(bundle_dir.name + ".lock"), wait=wait, shared=True):
        manifest = Manifest.load(marker)
        if manifest is None:
            raise PrepareError(f"code bundle {bundle_dir.name[:12]} in this machine's cache has no readable manifest")
        try:
            copied = copy_tree(bundle_dir, manifest, workdir, progress=wait)
        except StaleEntry as exc:
            raise PrepareError(f"code bundle {bundle_dir.name[:12]} changed in this machine's cache ({exc}); "
                               f"the next attempt fetches it again") from None
    if say is not None:
        say(_workdir_line(bundle_dir.name, copied, time.monotonic() - started))
    return workdir


def _workdir_line(sha256: str, copied: CopyResult, elapsed: float) -> str:
    return (f"working directory from code bundle {sha256[:12]} in {elapsed:.2f}s "
            f"({copied.files} files, {size_text(copied.size)}: {copied.method})")


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
                    copied = copy_tree(entry.final, manifest, workdir, progress=wait)
                except StaleEntry as exc:
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

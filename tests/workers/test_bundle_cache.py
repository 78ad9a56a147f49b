"""The machine's bundle cache and the working directories made from it (bundles/cache.py,
bundles/manifest.py and bundles/workdirs.py; the environments: node/environments.py): a bundle is streamed from a real HTTP server (the agent endpoint's contract:
GET /api/agent/bundles/<sha256> with the machine token) or a real S3 server into the cache, committed
only when its bytes hash to its name, verified by stat on every later use, fetched again when
touched, prepared by concurrent processes without corruption, and copied into working directories
that share no inode with it."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from torchyard import bundles
from torchyard.bundles import cache as bundle_cache
from torchyard.bundles import manifest as manifests
from torchyard.bundles import pack_directory, workdirs
from torchyard.bundles.cache import BundleSource, PrepareError
from torchyard.node import environments

WORKERS = Path(__file__).resolve().parents[2] / "workers"
TOKEN = "7.machine-secret"


@dataclass
class BundleServer:
    """Serves archives by sha256 the way the control plane's agent endpoint does; counts requests.
    `throttle` slows each megabyte (so that two preparations overlap for sure)."""

    archives: dict[str, bytes] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    throttle: float = 0.0
    cut_after: int | None = None  # bytes sent before the connection drops
    url: str = ""

    def add(self, archive: Path) -> str:
        data = archive.read_bytes()
        sha256 = hashlib.sha256(data).hexdigest()
        self.archives[sha256] = data
        return sha256

    def source(self, sha256: str) -> BundleSource:
        return BundleSource({"bundle": sha256}, self.url, TOKEN)


@pytest.fixture
def server() -> Iterator[BundleServer]:
    state = BundleServer()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def do_GET(self) -> None:
            sha256 = self.path.rsplit("/", 1)[-1]
            state.requests.append(sha256)
            data = state.archives.get(sha256)
            if self.headers.get("Authorization") != f"Machine {TOKEN}" or data is None:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for start in range(0, len(data), 1 << 20):
                if state.cut_after is not None and start >= state.cut_after:
                    self.close_connection = True
                    return
                self.wfile.write(data[start:start + (1 << 20)])
                time.sleep(state.throttle)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def make_project(root: Path, *, big: int = 0) -> Path:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "train.py").write_text("import pkg\nprint('hello')\n")
    os.chmod(root / "train.py", 0o755)
    (root / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    (root / "pkg" / "sub" / "data.bin").write_bytes(os.urandom(200_000))
    (root / "config.yaml").write_text("lr: 0.1\n")
    (root / "empty.txt").write_text("")
    (root / "latest").symlink_to("pkg/sub/data.bin")
    for i in range(big):
        (root / "pkg" / f"module_{i}.py").write_text(f"X = {i}\n" * 2000)
    return root


@pytest.fixture
def project(tmp_path: Path) -> Path:
    return make_project(tmp_path / "project")


@pytest.fixture
def bundle(server: BundleServer, project: Path, tmp_path: Path) -> str:
    return server.add(pack_directory(project, tmp_path / "bundle.tar.zst").path)


def tree(root: Path) -> dict[str, object]:
    """Every path under root with its content (files) or target (links)."""
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            found[rel] = ("link", os.readlink(path))
        elif path.is_file():
            found[rel] = path.read_bytes()
        else:
            found[rel] = "dir"
    return found


def cache_entry(cache: Path, sha256: str) -> Path:
    return cache / "bundles" / sha256


def said() -> tuple[list[str], Callable[[str], None]]:
    lines: list[str] = []
    return lines, lines.append


def test_a_bundle_is_streamed_into_the_cache_once_and_a_second_use_verifies_it_by_stat(
        server, bundle, project, tmp_path):
    cache = tmp_path / "cache"
    lines, say = said()
    first = bundle_cache.bundle_workdir(server.source(bundle), cache, tmp_path / "run1" / "work", wait=lambda: None, say=say)
    assert server.requests == [bundle]
    assert tree(first) == tree(project)
    assert any(line.startswith(f"fetched and unpacked code bundle {bundle[:12]}") for line in lines)
    entry = cache_entry(cache, bundle)
    manifest = manifests.Manifest.load(entry.with_name(bundle + ".ok"))
    assert manifest is not None and manifest.sha256 == bundle
    assert sorted(f.path for f in manifest.files) == sorted(
        p for p, v in tree(project).items() if isinstance(v, bytes))
    # Nothing else is left in the cache folder: no temporary directory, no archive.
    assert sorted(p.name for p in (cache / "bundles").iterdir()) == sorted([bundle, f"{bundle}.ok", f"{bundle}.lock"])

    lines.clear()
    second = bundle_cache.bundle_workdir(server.source(bundle), cache, tmp_path / "run2" / "work", wait=lambda: None, say=say)
    assert server.requests == [bundle]  # no second fetch
    assert tree(second) == tree(project)
    assert any(f"{bundle[:12]} is in this machine's cache (verified by stat: 5 files)" in line for line in lines)
    # The node's old two-step calls find it too.
    assert bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=say) == entry
    assert server.requests == [bundle]


def test_the_working_directory_shares_no_inode_with_the_cache_and_the_job_writes_only_to_its_own(
        server, bundle, project, tmp_path):
    cache = tmp_path / "cache"
    work = bundle_cache.bundle_workdir(server.source(bundle), cache, tmp_path / "work", wait=lambda: None, say=print)
    entry = cache_entry(cache, bundle)
    for path in (p for p in entry.rglob("*") if p.is_file() and not p.is_symlink()):
        rel = path.relative_to(entry)
        cached, copied = path.lstat(), (work / rel).lstat()
        assert cached.st_dev == copied.st_dev and cached.st_ino != copied.st_ino, rel
        assert not cached.st_mode & 0o222, f"{rel} is writable in the cache"
        assert copied.st_mode & stat.S_IWUSR, f"{rel} is not writable in the working directory"
        assert bool(cached.st_mode & stat.S_IXUSR) == bool(copied.st_mode & stat.S_IXUSR)
    # The job edits its code in place, truncates a file, appends to another, chmods a third.
    (work / "config.yaml").write_text("lr: 0.5\n")
    with open(work / "pkg" / "sub" / "data.bin", "r+b") as handle:
        handle.write(b"\0" * 100)
    with open(work / "train.py", "a") as handle:
        handle.write("print('changed')\n")
    os.chmod(work / "pkg" / "__init__.py", 0o600)
    manifest = manifests.Manifest.load(entry.with_name(bundle + ".ok"))
    assert manifest is not None and manifests.verify(entry, manifest) is None
    assert {k: v for k, v in tree(entry).items()} == tree(project)


@pytest.mark.parametrize("touch", ["rewritten in place", "truncated", "removed", "replaced", "chmod"])
def test_a_touched_cache_entry_is_detected_by_stat_and_fetched_again(server, bundle, project, tmp_path, touch):
    cache = tmp_path / "cache"
    bundle_cache.bundle_workdir(server.source(bundle), cache, tmp_path / "w1", wait=lambda: None, say=print)
    entry = cache_entry(cache, bundle)
    victim = entry / "pkg" / "__init__.py"
    time.sleep(0.02)  # timestamps move in ticks of a few ms; the manifest was recorded in an earlier one
    if touch == "rewritten in place":  # same size, so only its times tell
        os.chmod(victim, 0o644)
        victim.write_text("VALUE = 2\n")
        os.chmod(victim, 0o444)
    elif touch == "truncated":
        os.chmod(victim, 0o644)
        os.truncate(victim, 0)
    elif touch == "removed":
        victim.unlink()
    elif touch == "replaced":
        (entry / "pkg" / "other").write_text("VALUE = 3\n")
        os.replace(entry / "pkg" / "other", victim)
    else:
        os.chmod(victim, 0o666)
    lines, say = said()
    found = bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=say)
    assert any("changed since it was unpacked" in line and "pkg/__init__.py" in line for line in lines), lines
    assert server.requests == [bundle, bundle]
    assert tree(found) == tree(project)
    manifest = manifests.Manifest.load(entry.with_name(bundle + ".ok"))
    assert manifest is not None and manifests.verify(entry, manifest) is None


def test_an_entry_touched_after_the_check_fails_make_workdir_and_is_fetched_again_by_bundle_workdir(
        server, bundle, project, tmp_path):
    cache = tmp_path / "cache"
    entry = bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=print)
    time.sleep(0.02)
    os.chmod(entry / "config.yaml", 0o644)
    (entry / "config.yaml").write_text("lr: 9.9\n")
    with pytest.raises(PrepareError, match="changed in this machine's cache .*config.yaml"):
        bundle_cache.make_workdir(entry, tmp_path / "w1")
    assert not (tmp_path / "w1").exists()
    lines, say = said()
    work = bundle_cache.bundle_workdir(server.source(bundle), cache, tmp_path / "w2", wait=lambda: None, say=say)
    assert tree(work) == tree(project) and len(server.requests) == 2
    assert any("fetching it again" in line for line in lines)


def test_a_half_written_entry_or_an_older_layout_is_never_used(server, bundle, project, tmp_path):
    cache = tmp_path / "cache"
    root = cache / "bundles"
    # What a supervisor killed mid-unpack leaves: the final directory without its manifest (an older
    # version renamed first), and a temporary one.
    (root / bundle / "pkg").mkdir(parents=True)
    (root / bundle / "train.py").write_text("partial")
    (root / f".{bundle}.4242.tmp" / "pkg").mkdir(parents=True)
    found = bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=print)
    assert tree(found) == tree(project) and server.requests == [bundle]
    assert not list(root.glob(".*.tmp"))
    # A marker of the layout before manifests: not trusted, fetched again.
    (root / f"{bundle}.ok").write_text(json.dumps({"built_at": 1.0}))
    found = bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=print)
    assert tree(found) == tree(project) and server.requests == [bundle, bundle]


def test_bytes_that_do_not_hash_to_the_bundle_are_never_committed(server, project, tmp_path):
    cache = tmp_path / "cache"
    real = pack_directory(project, tmp_path / "real.tar.zst")
    (project / "train.py").write_text("print('evil')\n")
    other = pack_directory(project, tmp_path / "other.tar.zst")
    server.archives[real.sha256] = other.path.read_bytes()  # a store that serves the wrong bytes
    with pytest.raises(PrepareError, match=f"bundle {real.sha256[:12]} failed verification"):
        bundle_cache.bundle_workdir(server.source(real.sha256), cache, tmp_path / "work", wait=lambda: None, say=print)
    assert sorted(p.name for p in (cache / "bundles").iterdir()) == [f"{real.sha256}.lock"]
    assert not (tmp_path / "work").exists()


def test_a_download_cut_short_fails_the_preparation_and_leaves_nothing(server, tmp_path):
    project = make_project(tmp_path / "project")
    (project / "weights.bin").write_bytes(os.urandom(3 << 20))
    sha256 = server.add(pack_directory(project, tmp_path / "bundle.tar.zst").path)
    server.cut_after = 2 << 20
    cache = tmp_path / "cache"
    with pytest.raises(PrepareError, match=f"cannot fetch bundle {sha256[:12]} from {server.url}"):
        bundle_cache.bundle_workdir(server.source(sha256), cache, tmp_path / "work", wait=lambda: None, say=print)
    assert sorted(p.name for p in (cache / "bundles").iterdir()) == [f"{sha256}.lock"]
    server.cut_after = None  # the next try fetches it whole
    assert tree(bundle_cache.bundle_workdir(server.source(sha256), cache, tmp_path / "work", wait=lambda: None,
                                       say=print)) == tree(project)


def test_a_hostile_archive_is_refused_and_leaves_nothing(server, tmp_path):
    import io
    import tarfile

    import zstandard

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("ok.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
        info = tarfile.TarInfo("../../escape.py")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"x\n"))
    archive = tmp_path / "evil.tar.zst"
    archive.write_bytes(zstandard.ZstdCompressor().compress(raw.getvalue()))
    sha256 = server.add(archive)
    cache = tmp_path / "cache"
    with pytest.raises(PrepareError, match=r"refused: \.\./\.\./escape\.py: has a '\.\.' component"):
        bundle_cache.cached_bundle(server.source(sha256), cache, wait=lambda: None, say=print)
    assert sorted(p.name for p in (cache / "bundles").iterdir()) == [f"{sha256}.lock"]
    assert not (tmp_path / "escape.py").exists() and not (cache / "escape.py").exists()


PREPARE_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from torchyard.bundles import cache
go = Path(sys.argv[6])
while not go.exists():
    time.sleep(0.005)
source = cache.BundleSource({"bundle": sys.argv[3]}, sys.argv[2], sys.argv[4])
cache.bundle_workdir(source, Path(sys.argv[5]), Path(sys.argv[7]), wait=lambda: None, say=print)
"""


def test_two_processes_preparing_the_same_bundle_at_once_fetch_it_once_and_both_get_it_whole(
        server, tmp_path):
    project = make_project(tmp_path / "project", big=40)  # ~1 MB of modules: some time to overlap
    (project / "weights.bin").write_bytes(os.urandom(3 << 20))
    sha256 = server.add(pack_directory(project, tmp_path / "bundle.tar.zst").path)
    server.throttle = 0.1
    cache, go = tmp_path / "cache", tmp_path / "go"
    procs = [
        subprocess.Popen([sys.executable, "-c", PREPARE_SCRIPT, str(WORKERS), server.url, sha256, TOKEN,
                          str(cache), str(go), str(tmp_path / f"node{i}" / "work")],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for i in range(2)
    ]
    time.sleep(0.5)  # both started and polling
    go.touch()
    outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    assert server.requests == [sha256], outputs  # one fetch, the other waited for it
    assert sum("fetched and unpacked" in out for out in outputs) == 1
    assert sum("is in this machine's cache" in out for out in outputs) == 1
    expected = tree(project)
    for i in range(2):
        assert tree(tmp_path / f"node{i}" / "work") == expected
    entry = cache_entry(cache, sha256)
    manifest = manifests.Manifest.load(entry.with_name(sha256 + ".ok"))
    assert manifest is not None and manifests.verify(entry, manifest) is None and tree(entry) == expected


def test_an_entry_being_copied_is_not_replaced_until_the_copy_is_done(server, bundle, project, tmp_path):
    cache = tmp_path / "cache"
    entry = bundle_cache.cached_bundle(server.source(bundle), cache, wait=lambda: None, say=print)
    time.sleep(0.02)
    (entry / "empty.txt").chmod(0o600)  # touched: the next node rebuilds it
    go = tmp_path / "go"
    go.touch()
    lock = cache / "bundles" / f"{bundle}.lock"
    with bundle_cache.cache_lock(lock, wait=lambda: None, shared=True):  # a node copying the entry
        proc = subprocess.Popen([sys.executable, "-c", PREPARE_SCRIPT, str(WORKERS), server.url, bundle, TOKEN,
                                 str(cache), str(go), str(tmp_path / "other" / "work")],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        time.sleep(1.0)
        assert proc.poll() is None and server.requests == [bundle]  # waiting for the copy to end
        assert (entry / "train.py").exists()
    out = proc.communicate(timeout=60)[0]
    assert proc.returncode == 0, out
    assert "fetching it again" in out and server.requests == [bundle, bundle]
    assert tree(tmp_path / "other" / "work") == tree(project)


def test_a_bundle_is_streamed_from_s3_when_the_store_is_s3(s3_server, monkeypatch, project, tmp_path):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    packed = pack_directory(project, tmp_path / "bundle.tar.zst")
    bucket = s3_server.create_bucket()
    s3_server.client().upload_file(str(packed.path), bucket, f"bundles/{packed.sha256}.tar.zst")
    source = BundleSource({"bundle": packed.sha256, "uri": f"s3://{bucket}/bundles/{packed.sha256}.tar.zst"})
    lines, say = said()
    work = bundle_cache.bundle_workdir(source, tmp_path / "cache", tmp_path / "work", wait=lambda: None, say=say)
    assert tree(work) == tree(project)
    assert any(f"from s3://{bucket}" in line for line in lines), lines


# --- the environment ------------------------------------------------------------------------------
def test_the_environment_key_remembers_local_packages_per_bundle_and_names_the_interpreter(tmp_path):
    cache = tmp_path / "cache"
    work = make_project(tmp_path / "work")
    requirements = ["-e .", "./pkg"]
    python = sys.executable
    fresh = environments.environment_key(python, requirements, work)
    remembered = environments.environment_key(python, requirements, work, bundle="a" * 64, cache_dir=cache)
    assert remembered == fresh  # the same key, now remembered
    assert len(list((cache / "envs" / "paths").iterdir())) == 2
    # A second launch of that bundle reads the remembered hashes: it does not read the project (here
    # changed behind its back to show it; a working directory is always a fresh copy of the bundle).
    (work / "pkg" / "__init__.py").write_text("VALUE = 2\n")
    assert environments.environment_key(python, requirements, work, bundle="a" * 64, cache_dir=cache) == fresh
    assert environments.environment_key(python, requirements, work) != fresh
    assert environments.environment_key(python, requirements, work, bundle="b" * 64, cache_dir=cache) != fresh
    # Another interpreter file (a Python upgraded in place) is another environment.
    copy = tmp_path / "python3"
    shutil.copy2(os.path.realpath(python), copy)
    os.utime(copy, ns=(1, 1))
    assert environments.environment_key(str(copy), ["x"], work) != environments.environment_key(str(copy) + "x", ["x"], work)
    before = environments.environment_key(str(copy), ["x"], work)
    os.utime(copy, ns=(2, 2))
    assert environments.environment_key(str(copy), ["x"], work) != before


def test_a_cached_environment_is_checked_without_running_anything_and_rebuilt_when_broken(tmp_path):
    cache, work = tmp_path / "cache", tmp_path / "work"
    work.mkdir()
    ran: list[list[str]] = []

    def run(argv: list[str]) -> int:
        ran.append(argv)
        return subprocess.run(argv, cwd=work, stdin=subprocess.DEVNULL, capture_output=True).returncode

    def environment() -> str:
        # zstandard is in the training Python already: pip only checks it, offline.
        return environments.prepared_environment(sys.executable, ["zstandard"], work, cache, pip=["zstandard"], run=run,
                                            say=print, wait=lambda: None, errors=lambda: [], bundle="c" * 64)

    env_python = environment()
    assert len(ran) == 2 and os.path.exists(env_python)
    assert environment() == env_python
    assert len(ran) == 2, "a cache hit ran a command"
    os.unlink(env_python)  # a broken environment is not trusted
    assert environment() == env_python and len(ran) == 4 and os.path.exists(env_python)


def test_a_plain_directory_without_a_manifest_is_copied_as_it_is(project, tmp_path):
    work = bundle_cache.make_workdir(project, tmp_path / "work")
    assert tree(work) == tree(project)


def test_bundles_unpack_stream_is_what_the_cache_commits(project, tmp_path):
    """The manifest records what unpack_stream made: every file, directory and link."""
    packed = pack_directory(project, tmp_path / "b.tar.zst")
    with open(packed.path, "rb") as handle:
        info = bundles.unpack_stream(handle, tmp_path / "entry", sha256=packed.sha256, read_only=True)
    manifest = manifests.record(tmp_path / "entry", info, sha256=packed.sha256, built_at=0.0)
    assert manifest.directories == ["pkg", "pkg/sub"]
    assert manifest.symlinks == [("latest", "pkg/sub/data.bin")]
    assert manifests.Manifest.from_json(manifest.to_json()) == manifest
    copied = workdirs.copy_tree(tmp_path / "entry", manifest, tmp_path / "copy")
    assert copied.files == 5 and tree(tmp_path / "copy") == tree(project)


def test_an_archive_made_by_gnu_tar_from_dot_is_cached_and_copied_whole(server, project, tmp_path):
    """`tar -cf - -C project .` (GNU tar: a "./" member, "./"-prefixed names, long names as 'L'
    members), compressed by zstd: what a user's own tooling might upload."""
    import zstandard

    deep = project / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / "long_name_module.py").write_text("Z = 1\n")
    archive = tmp_path / "gnu.tar.zst"
    tarred = subprocess.run(["tar", "-cf", "-", "-C", str(project), "."], check=True, capture_output=True).stdout
    archive.write_bytes(zstandard.ZstdCompressor().compress(tarred))
    sha256 = server.add(archive)
    work = bundle_cache.bundle_workdir(server.source(sha256), tmp_path / "cache", tmp_path / "work", wait=lambda: None,
                                  say=print)
    assert tree(work) == tree(project)


class Stop(Exception):
    pass


def test_a_slow_download_heartbeats_all_along_and_a_stop_ends_it_leaving_nothing(server, tmp_path):
    project = make_project(tmp_path / "project")
    (project / "weights.bin").write_bytes(os.urandom(4 << 20))
    sha256 = server.add(pack_directory(project, tmp_path / "bundle.tar.zst").path)
    server.throttle = 0.4  # 4 MB in about 2 s
    beats: list[float] = []
    bundle_cache.bundle_workdir(server.source(sha256), tmp_path / "cache", tmp_path / "work",
                           wait=lambda: beats.append(time.monotonic()), say=print)
    assert len(beats) >= 4, beats  # a beat per chunk received, not one at the end

    def stop_on_the_third_beat() -> None:
        beats.append(time.monotonic())
        if len(beats) == 3:
            raise Stop()

    beats.clear()
    with pytest.raises(Stop):
        bundle_cache.bundle_workdir(server.source(sha256), tmp_path / "cache2", tmp_path / "work2",
                               wait=stop_on_the_third_beat, say=print)
    assert sorted(p.name for p in (tmp_path / "cache2" / "bundles").iterdir()) == [f"{sha256}.lock"]
    assert not (tmp_path / "work2").exists()

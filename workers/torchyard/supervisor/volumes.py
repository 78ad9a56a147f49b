"""Volumes: named host paths an operator declares on a machine (`torchyard agent --volume
NAME=PATH`, or the server's `PATCH /api/machines/{id}`), which a job asks for by name.

Nothing is mounted and nothing needs root: a node sees each of its job's volumes as
`TORCHYARD_VOLUME_<NAME>` (the path on its machine) in every process it starts and, when the
volume's `mount_path` is relative, as a symbolic link `<working directory>/<mount_path>` to that
path. An absolute `mount_path` cannot be made without mounting, so it is only accepted where it is
the volume's path on the machine itself (an operator who mounts a share at the same path
everywhere); elsewhere the node fails before launch and says to use a relative one or the variable.

A `ReadWriteMany` volume must be one filesystem on every node: the preflight proves it. Each node
other than the master writes a file with a random nonce under `<volume>/.torchyard/`, names it in
its hello, and the master reads it from its own path of the volume before answering; a volume whose
file is not there (another directory, a local disk on each machine) fails both nodes, naming both
machines. The writer removes its file once answered, so the file never has to outlive the answer
(the master reading it while the writer waits for the reply is what makes the check race-free).
`ReadWriteOnce` is a directory per machine and is not checked.

Pure functions: the node supervisor calls them, tests call them directly.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from torchyard import protocol
from torchyard.bundles.cache import PrepareError

NAME_PATTERN = protocol.VOLUME_NAME_PATTERN
NAME = re.compile(NAME_PATTERN)
READ_WRITE_MANY = "ReadWriteMany"
READ_WRITE_ONCE = "ReadWriteOnce"
ACCESS_MODES = (READ_WRITE_MANY, READ_WRITE_ONCE)
PROBE_FOLDER = ".torchyard"


class VolumeError(PrepareError):
    """A volume of the job cannot be given to this node; the message names the machine and path."""


def env_name(name: str) -> str:
    """shared-data -> TORCHYARD_VOLUME_SHARED_DATA."""
    return protocol.ENV_VOLUME_PREFIX + re.sub(r"[-.]", "_", name).upper()


def volume_env(volumes: list[protocol.NodeVolume]) -> dict[str, str]:
    """The variables every process of the node gets: each volume's path on this machine."""
    return {env_name(str(v["name"])): str(v["path"]) for v in volumes}


def _where(volume: protocol.NodeVolume) -> str:
    machine = volume.get("machine")
    return f"on machine {machine}" if machine else "on this machine"


def check_present(volumes: list[protocol.NodeVolume]) -> None:
    """Fail the node before anything starts when a volume's path is not a directory here."""
    for volume in volumes:
        path = str(volume["path"])
        if not os.path.isdir(path):
            raise VolumeError(f"volume {volume['name']}: {path} does not exist {_where(volume)} "
                              f"(declared by the machine's agent or on the server); create or mount it there")


def link_volumes(volumes: list[protocol.NodeVolume], workdir: Path) -> list[Path]:
    """Make each volume visible at its mount_path: a link in the working directory for a relative
    one; an absolute one must be the volume's path itself (nothing is mounted). Returns the links."""
    links = []
    root = Path(workdir).resolve()
    for volume in volumes:
        name, path = str(volume["name"]), str(volume["path"])
        mount_path = str(volume.get("mount_path") or name)
        if os.path.isabs(mount_path):
            if os.path.normpath(mount_path) != os.path.normpath(path):
                raise VolumeError(
                    f"volume {name}: mount_path {mount_path} is absolute, but the volume is {path} "
                    f"{_where(volume)} and a node cannot mount without root; give a relative mount_path "
                    f"(a link in the job's working directory) or read ${env_name(name)}")
            continue
        relative = os.path.normpath(mount_path)
        link = root / relative
        # The folder it goes in must stay inside (a bundle's own links included); the link itself leaves.
        if relative == "." or relative.startswith("..") or not link.parent.resolve().is_relative_to(root):
            raise VolumeError(f"volume {name}: mount_path {mount_path} leaves the job's working directory")
        if link.is_symlink() and os.readlink(link) == path:
            links.append(link)
            continue
        if link.exists() or link.is_symlink():
            raise VolumeError(f"volume {name}: mount_path {mount_path} is already a file or folder of the job's "
                              f"code; choose another mount_path")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(path, target_is_directory=True)
        links.append(link)
    return links


# --- preflight: is a ReadWriteMany volume one filesystem on every node? ---------------------------
@dataclass(frozen=True)
class Probe:
    """A file a node wrote on a volume for the master to find."""

    name: str  # the volume's
    file: str  # relative to the volume's path
    nonce: str
    written: Path

    def hello(self) -> VolumeProbe:
        return {"name": self.name, "file": self.file, "nonce": self.nonce}


class VolumeProbe(TypedDict):
    """A Probe as a node's preflight hello names it to the master."""

    name: str
    file: str
    nonce: str


def shared(volumes: list[protocol.NodeVolume]) -> list[protocol.NodeVolume]:
    return [v for v in volumes if (v.get("access_mode") or READ_WRITE_MANY) == READ_WRITE_MANY]


def write_probes(volumes: list[protocol.NodeVolume], *, job_id: int, attempt: int, node_rank: int) -> list[Probe]:
    """One nonce file per ReadWriteMany volume, under `<path>/.torchyard/`."""
    probes: list[Probe] = []
    try:
        for volume in shared(volumes):
            name, path = str(volume["name"]), str(volume["path"])
            file = f"{PROBE_FOLDER}/preflight-job{job_id}-attempt{attempt}-node{node_rank}-{secrets.token_hex(6)}"
            nonce = secrets.token_hex(16)
            target = Path(path) / file
            try:
                target.parent.mkdir(exist_ok=True)
                with open(target, "x") as out:
                    out.write(nonce)
            except OSError as exc:
                raise VolumeError(f"volume {name}: cannot write to {path} {_where(volume)} ({exc.strerror or exc}); "
                                  f"access_mode ReadWriteMany is proven with a file every node writes") from exc
            probes.append(Probe(name=name, file=file, nonce=nonce, written=target))
    except BaseException:
        remove_probes(probes)
        raise
    return probes


def remove_probes(probes: list[Probe]) -> None:
    for probe in probes:
        with contextlib.suppress(OSError):
            probe.written.unlink()


def unshared(mine: list[protocol.NodeVolume], hello: Mapping[str, object], *, machine: str = "") -> str:
    """The master's check of a peer's hello (preflight.Hello, as the peer sent it: read defensively):
    "" when every ReadWriteMany volume of the job holds the file the peer wrote, else why not,
    naming both machines."""
    probes = hello.get("volumes")
    sent = {str(p.get("name")): p for p in (probes if isinstance(probes, list) else []) if isinstance(p, dict)}
    rank = hello.get("node_rank")
    theirs = f"{hello.get('machine') or hello.get('hostname') or 'unknown machine'} (node {rank})"
    for volume in shared(mine):
        name, path = str(volume["name"]), str(volume["path"])
        ours = f"{machine or volume.get('machine') or 'the master'} (node 0, the master)"
        probe = sent.get(name)
        found = None
        if probe is not None and _safe_relative(str(probe.get("file") or "")):
            with contextlib.suppress(OSError, UnicodeDecodeError):
                found = (Path(path) / str(probe["file"])).read_text()[:64]
        if probe is None or not probe.get("nonce") or found != probe.get("nonce"):
            return (f"volume {name} is not the same filesystem on {theirs} and {ours}: the file node {rank} "
                    f"wrote in its path of the volume is not in {path} here. Its access_mode ReadWriteMany needs one "
                    f"shared filesystem (NFS, CephFS, ...) at the volume's path on every machine; declare "
                    f"the volume on a shared filesystem, or ask for access_mode ReadWriteOnce (a directory "
                    f"per machine)")
    return ""


def _safe_relative(file: str) -> bool:
    """Only a probe file of ours: the master never reads a path a peer made up elsewhere."""
    return bool(re.fullmatch(r"\.torchyard/preflight-job\d+-attempt\d+-node\d+-[0-9a-f]+", file))

"""The memory tier's transport: a checkpoint's bytes to the agents that hold them, and back.

``checkpointing.memory`` in the job's config names, for this node, where its saves go (``holders``:
its own machine's agent first, then its buddies on other machines, each as ``http://ADDRESS:PORT``
on the network the job's preflight chose) and, on a recovery from memory, the committed manifest
and the living machines that hold it (``resume``). The key the agents ask for is in the ranks'
environment (protocol.ENV_MEMORY_KEY). The routes are agent/memory.py's.

One HTTP connection per holder, kept open between saves (a save every step is a request each, no
handshake); the holders are written side by side, each from the same serialized bytes.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import urllib.parse
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypedDict

from torchyard import protocol
from torchyard.sdk.config import job_config

CONNECT_TIMEOUT_S = 3.0
TRANSFER_TIMEOUT_S = 60.0
CHUNK = 1 << 22


class Holder(TypedDict):
    machine: str
    url: str  # http://ADDRESS:PORT


class MemoryTierError(RuntimeError):
    """A memory save or read that did not complete, saying where and why."""


def settings() -> dict[str, Any]:
    """The job's checkpointing.memory as the supervisor wrote it for this node ({} when off)."""
    section = job_config()["checkpointing"].get("memory")
    return dict(section) if isinstance(section, dict) else {}


def every_n_steps() -> int:
    """How often the job keeps a checkpoint in memory (0: it keeps none)."""
    memory = settings()
    return int(memory.get("every_n_steps") or 0) if memory.get("holders") else 0


def job_path(job_id: int | str, step: int | None = None, name: str | None = None) -> str:
    path = f"/jobs/{job_id}"
    return path if step is None else f"{path}/steps/{int(step)}/{name}"


def _key() -> str:
    return os.environ.get(protocol.ENV_MEMORY_KEY, "")


def _connection(url: str, timeout: float) -> http.client.HTTPConnection:
    parsed = urllib.parse.urlsplit(url)
    return http.client.HTTPConnection(parsed.hostname or "", parsed.port or 80, timeout=timeout)


class Replicator:
    """Writes a save's bytes to every holder of this node. Used from one thread at a time (the save's)."""

    def __init__(self) -> None:
        self._connections: dict[str, http.client.HTTPConnection] = {}
        self._pool: ThreadPoolExecutor | None = None

    def put_all(self, holders: list[Holder], path: str, data: memoryview, sha256: str) -> list[str]:
        """PUT the bytes to every holder at once; the machines that took them, or MemoryTierError
        naming every one that did not."""
        if not holders:
            raise MemoryTierError("no machine holds this node's memory checkpoints (an agent without a memory store?)")
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="torchyard-memory")
        outcomes = list(self._pool.map(lambda h: self._put(h, path, data, sha256), holders))
        failed = [why for why in outcomes if why]
        if failed:
            raise MemoryTierError("; ".join(failed))
        return [h["machine"] for h in holders]

    def _put(self, holder: Holder, path: str, data: memoryview, sha256: str) -> str:
        headers = {"Authorization": f"Bearer {_key()}", "X-Sha256": sha256, "Content-Length": str(len(data)),
                   "Content-Type": "application/octet-stream"}
        for fresh in (False, True):  # a kept connection the holder closed meanwhile is opened again once
            conn = self._connections.get(holder["url"]) if not fresh else None
            if conn is None:
                conn = self._connections[holder["url"]] = _connection(holder["url"], TRANSFER_TIMEOUT_S)
            try:
                conn.request("PUT", path, body=data, headers=headers)
                response = conn.getresponse()
                body = response.read()
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                self._connections.pop(holder["url"], None)
                if not fresh and isinstance(exc, (http.client.RemoteDisconnected, BrokenPipeError,
                                                  ConnectionResetError)):
                    continue
                return f"{holder['machine']} ({holder['url']}): {exc!r}"
            if response.status == 201:
                return ""
            if response.will_close:
                conn.close()
                self._connections.pop(holder["url"], None)
            return f"{holder['machine']} answered {response.status}: {_error_of(body)}"
        return f"{holder['machine']}: the connection closed twice"

    def close(self) -> None:
        for conn in self._connections.values():
            with contextlib.suppress(OSError):
                conn.close()
        self._connections.clear()


def _error_of(body: bytes) -> str:
    import json

    try:
        return str(json.loads(body).get("error") or body[:200])
    except (ValueError, AttributeError):
        return body[:200].decode(errors="replace")


def fetch(holders: list[Holder], path: str, size: int, sha256: str) -> tuple[bytearray, str]:
    """A committed file's bytes from the first holder that has them whole (its size and sha256 as the
    manifest says), and that holder's machine; MemoryTierError naming why each one failed."""
    failures = []
    for holder in holders:
        conn = _connection(holder["url"], CONNECT_TIMEOUT_S)
        try:
            conn.connect()
            if conn.sock is not None:
                conn.sock.settimeout(TRANSFER_TIMEOUT_S)
            conn.request("GET", path, headers={"Authorization": f"Bearer {_key()}"})
            response = conn.getresponse()
            if response.status != 200:
                failures.append(f"{holder['machine']} answered {response.status}: {_error_of(response.read())}")
                continue
            data = bytearray(size)
            view, got = memoryview(data), 0
            while got < size:
                n = response.readinto(view[got:got + CHUNK])
                if not n:
                    break
                got += n
            if got != size or response.read(1):
                failures.append(f"{holder['machine']} sent {got if got != size else 'more than'} of {size} bytes")
            elif hashlib.sha256(data).hexdigest() != sha256:
                failures.append(f"{holder['machine']}'s copy fails its sha256 check")
            else:
                return data, holder["machine"]
        except (OSError, http.client.HTTPException) as exc:
            failures.append(f"{holder['machine']} ({holder['url']}): {exc!r}")
        finally:
            conn.close()
    raise MemoryTierError("; ".join(failures) or "no machine holds it")

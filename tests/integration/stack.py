"""A real Torchyard stack for integration tests, started exactly as `make run` starts it
(`torchyard-server run`), talked to only over HTTP and WebSockets."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ledger
import psutil
import redis
import redis_databases
import requests
from torchyard import protocol
from torchyard import stream_contract as wire
from websockets.exceptions import WebSocketException
from websockets.sync.client import connect as ws_connect

from .databases import ROOT, create_database, drop_database

SERVER = str(Path(sys.executable).with_name("torchyard-server"))
ADMIN = ("admin", "correct-horse-battery")
_ACCESS_LINE = re.compile(r'"(GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) /[^"]*" \d{3} ')
# The launcher's children (launcher.plan_children), told apart by words of their command lines.
LAUNCHER_CHILDREN = {
    "web": ("daphne",),
    "controller": ("worker", "control"),
    "beat": ("beat",),
    "ingest": ("ingest_events",),
}


FINAL_STATUSES = frozenset({"completed", "failed", "stopped"})
# A job's stream with nothing on it for this long: a wait asks anyway (a change that sent nothing
# would otherwise go unseen until its timeout).
STREAM_QUIET_S = 2.0


@dataclass
class Stack:
    base: str
    data_dir: Path
    log_path: Path
    process: subprocess.Popen
    token: str = ""
    database: str = ""  # its own PostgreSQL database, if it has one (start_pg_stack)
    session: requests.Session = field(default_factory=requests.Session)

    # --- HTTP -----------------------------------------------------------------------------------
    def api(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = kwargs.pop("headers", {})
        if self.token:
            headers.setdefault("Authorization", f"Token {self.token}")
        return self.session.request(method, self.base + path, headers=headers, timeout=30, **kwargs)

    def job(self, job_id: int) -> dict[str, Any]:
        response = self.api("GET", f"/api/jobs/{job_id}")
        response.raise_for_status()
        return response.json()

    def submit(self, spec: dict[str, Any]) -> dict[str, Any]:
        response = self.api("POST", "/api/jobs", json=spec)
        assert response.status_code == 201, response.text
        return response.json()

    def wait_job(self, job_id: int, statuses: set[str], timeout: float = 120.0) -> dict[str, Any]:
        """The job's detail once its status is one of `statuses` (read when its stream says it changed).
        A final status counts once its event is stored too: the database has the status as soon as
        the controller commits it, the event log when the ingest loop has caught up, and a test that
        then reads the job's events or logs must find everything up to the end."""
        job: dict[str, Any] = {}

        def reached() -> bool:
            job.update(self.job(job_id))
            if job["status"] not in statuses:
                return False
            return job["status"] not in FINAL_STATUSES or any(
                e.get("scope") == "job" and e["status"] == job["status"] for e in self.events(job_id, protocol.STATE))

        if not self.watch_job(job_id, reached, timeout):
            raise AssertionError(f"job {job_id} is {job.get('status')} after {timeout}s, wanted {statuses}:\n"
                                 f"{json.dumps(job, indent=1)[:3000]}\n--- stack log tail ---\n{self.log_tail()}")
        return job

    def watch_job(self, job_id: int, done: Callable[[], bool], timeout: float,
                  on: frozenset[str] = frozenset({protocol.STATE})) -> bool:
        """Whether `done()` (which reads what it needs over the API) came to hold within `timeout` s,
        asked once the job's stream is joined and again whenever the stream brings an event of a
        type in `on` or a `job` message (the job changed), else every STREAM_QUIET_S. A stream
        that breaks (a test may kill the web process) is joined again. It opens on its tail
        (`?history=tail`): a job's whole log is not what a wait is about."""
        deadline = time.monotonic() + timeout
        url = self.ws_url(f"/api/jobs/{job_id}/stream?history=tail")
        headers = {"Authorization": f"Token {self.token}"}

        def news(message: dict[str, Any]) -> bool:
            return message["type"] == wire.JOB or (
                message["type"] == wire.EVENTS and any(e["type"] in on for e in message["events"]))

        while (left := deadline - time.monotonic()) > 0:
            try:
                with ws_connect(url, additional_headers=headers, open_timeout=min(5.0, left)) as ws:
                    joined = False  # until `replayed`, the stream brings what is stored: old news
                    while (left := deadline - time.monotonic()) > 0:
                        try:
                            message = json.loads(ws.recv(timeout=min(STREAM_QUIET_S, left)))
                        except TimeoutError:
                            message = None  # quiet: ask anyway
                        if message is not None and message["type"] == wire.REPLAYED:
                            joined = True
                        elif message is not None and not (joined and news(message)):
                            continue
                        if done():
                            return True
            except (OSError, WebSocketException, requests.RequestException):
                time.sleep(0.3)  # the web process is away: join again once it is back
        return False

    def watch_cluster(self, done: Callable[[], bool], timeout: float) -> bool:
        """Whether `done()` came to hold within `timeout` s, asked whenever the cluster's stream brings
        news (a job's state, the queue, the machines: a sweep or a pipeline moves with its jobs), at
        most every half second, and every STREAM_QUIET_S when it is quiet."""
        deadline = time.monotonic() + timeout
        headers = {"Authorization": f"Token {self.token}"}
        asked = 0.0
        while (left := deadline - time.monotonic()) > 0:
            try:
                with ws_connect(self.ws_url("/api/cluster/stream"), additional_headers=headers,
                                open_timeout=min(5.0, left)) as ws:
                    while (left := deadline - time.monotonic()) > 0:
                        with contextlib.suppress(TimeoutError):
                            ws.recv(timeout=min(STREAM_QUIET_S, left))
                        if time.monotonic() - asked < 0.5:
                            continue
                        asked = time.monotonic()
                        if done():
                            return True
            except (OSError, WebSocketException, requests.RequestException):
                time.sleep(0.3)
        return False

    def events(self, job_id: int, types: str = "") -> list[dict[str, Any]]:
        out, after = [], 0
        while True:
            page = self.api("GET", f"/api/jobs/{job_id}/events", params={"after": after, "type": types}).json()
            out.extend(page["events"])
            if not page["events"]:
                return out
            after = page["next_after"]

    def logs(self, job_id: int) -> list[dict[str, Any]]:
        """Every log event of the job (all attempts), oldest first."""
        return self.api("GET", f"/api/jobs/{job_id}/logs", params={"limit": 10000}).json()["events"]

    def job_log_tail(self, job_id: int, lines: int = 40) -> str:
        """The job's last log lines, attempt and rank tagged: what a failing test needs to show."""
        return "\n".join(f"[attempt {e['attempt']} rank {e['rank']}] {e['line']}" for e in self.logs(job_id)[-lines:])

    def ws_url(self, path: str) -> str:
        return self.base.replace("http://", "ws://") + path

    def log_tail(self, lines: int = 80) -> str:
        """The stack log's last lines, without the web server's access lines: a test that polls
        fills the tail with its own GETs and hides what the controller and agents said."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join([line for line in text if not _ACCESS_LINE.search(line)][-lines:])

    # --- processes ------------------------------------------------------------------------------
    def job_processes(self, job_id: int) -> list[psutil.Process]:
        """Every live process this stack launched for the job (they all carry TORCHYARD_JOB_ID,
        and TORCHYARD_RUN_DIR under this stack's data dir: other stacks may have a job of that id)."""
        from torchyard.node.proctree import find_job_processes, is_alive

        return [p for p in find_job_processes(job_id, under=self.data_dir) if is_alive(p)]

    def kill_rank(self, job_id: int, node_rank: str, attempt: str, script: str = "mlp_ddp.py") -> None:
        """SIGKILL one training process (not torchrun) of the job's node `node_rank` in `attempt`."""
        victims = [
            p for p in self.job_processes(job_id)
            if p.environ().get("TORCHYARD_NODE_RANK") == node_rank and p.environ().get("TORCHYARD_ATTEMPT") == attempt
            and script in " ".join(p.cmdline()) and "torch.distributed.run" not in " ".join(p.cmdline())
        ]
        assert victims, f"no training process of node {node_rank} attempt {attempt}:\n{self.log_tail()}"
        victims[0].send_signal(signal.SIGKILL)

    def wait_warm(self, timeout: float = 180.0) -> list[dict[str, Any]]:
        """Every local agent's warm pool of the training Python, once each answers (the agents start
        them as they start; importing torch on this machine takes seconds)."""
        from torchyard.warm import pools

        agents = sorted((self.data_dir / "agents").glob("local-*"))
        deadline = time.monotonic() + timeout
        while True:
            # A pool's socket is beside its log, or in /tmp where that path is too long (pools.socket_of).
            answers = [next(filter(None, (pools.hello(pools.socket_of(agent / "cache", log.stem))
                                          for log in (agent / "cache" / pools.WARM_DIR).glob("*.log"))), None)
                       for agent in agents]
            if agents and all(answers):
                return [a for a in answers if a]
            if time.monotonic() > deadline:
                logs = "\n".join(f"{p}: {p.read_text()[-2000:]}" for a in agents
                                 for p in (a / "cache" / pools.WARM_DIR).glob("*.log"))
                raise AssertionError(f"no warm pool in {agents}:\n{logs}\n{self.log_tail()}")
            time.sleep(0.5)

    def wait_checkpoint(self, job_id: int, timeout: float = 90) -> dict[str, Any]:
        """The job's newest committed checkpoint, once there is one."""
        found: list[dict[str, Any]] = []

        def committed() -> bool:
            found[:] = self.api("GET", f"/api/jobs/{job_id}/checkpoints").json()
            return bool(found)

        if not self.watch_job(job_id, committed, timeout, on=frozenset({protocol.CHECKPOINT})):
            raise AssertionError(f"no checkpoint committed:\n{self.log_tail()}")
        return found[0]

    def wait_no_job_processes(self, job_id: int, timeout: float = 20.0) -> list[psutil.Process]:
        deadline = time.monotonic() + timeout
        left = self.job_processes(job_id)
        while left and time.monotonic() < deadline:
            time.sleep(0.3)
            left = self.job_processes(job_id)
        return left

    def child(self, name: str) -> psutil.Process:
        """The launcher's child `name` ("web", "controller", "beat" or "ingest"), as it runs now."""
        wanted = LAUNCHER_CHILDREN[name]
        for proc in psutil.Process(self.process.pid).children():
            with contextlib.suppress(psutil.Error):
                if set(wanted) <= set(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                    return proc
        raise LookupError(f"the launcher runs no {name} child now")

    def kill_child(self, name: str, *, meanwhile: Callable[[], object] | None = None,
                   timeout: float = 60.0) -> psutil.Process:
        """kill -9 of the launcher's child `name` (and `meanwhile()` right after, while it is down);
        returns its successor once the launcher has started it again (and, for the web process,
        once it answers)."""
        victim = self.child(name)
        victim.kill()
        victim.wait(timeout=10)
        if meanwhile is not None:
            meanwhile()
        deadline = time.monotonic() + timeout
        while True:
            with contextlib.suppress(LookupError, psutil.Error):
                successor = self.child(name)
                if successor.pid != victim.pid and (name != "web" or self._answers()):
                    return successor
            if time.monotonic() > deadline:
                raise AssertionError(f"the launcher did not restart {name} within {timeout:.0f}s:\n{self.log_tail()}")
            time.sleep(0.2)

    def _answers(self) -> bool:
        try:
            return requests.get(self.base + "/api/health", timeout=2).status_code == 200
        except requests.RequestException:
            return False

    # --- lifecycle ------------------------------------------------------------------------------
    def wait_ready(self, machines: int, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"the stack exited with {self.process.returncode}:\n{self.log_tail()}")
            try:
                if not self.token:
                    r = requests.post(self.base + "/api/auth/token", json=dict(zip(("username", "password"), ADMIN, strict=False)), timeout=5)
                    if r.status_code == 200:
                        self.token = r.json()["token"]
                if self.token:
                    listed = self.api("GET", "/api/machines").json()
                    if sum(1 for m in listed if m["status"] == "online") >= machines:
                        return
            except requests.RequestException:
                pass
            time.sleep(0.5)
        raise AssertionError(f"the stack was not ready in {timeout}s:\n{self.log_tail()}")

    def stop(self) -> None:
        started_at = time.monotonic()
        self._stop()
        ledger.record_stack("stop", time.monotonic() - started_at)

    def _stop(self) -> None:
        if self.process.poll() is None:
            # Everything the stack started, taken while the launcher still parents it: whatever
            # survives the launcher's own shutdown is ended here, or it would consume the next
            # stack's queues and event stream (they share the test Redis database).
            started = psutil.Process(self.process.pid).children(recursive=True)
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            for child in started:
                with contextlib.suppress(psutil.Error):
                    child.kill()


def start_stack(tmp: Path, *, env: dict[str, str], agents: int = 2, host: str = "127.0.0.1",
                args: tuple[str, ...] = ()) -> Stack:
    """`torchyard-server run [args]` with its web process on `host` (the bridge address when the
    agents live in network namespaces) and `agents` local agents; ready once they are online."""
    started_at = time.monotonic()
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        port = probe.getsockname()[1]
    data_dir = tmp / "data"
    log_path = tmp / "stack.log"
    # The store and the Rust coordinator's settings that would name it or a POST /jobs default.
    full_env = {k: v for k, v in os.environ.items() if k not in (
        "DATABASE_URL", "REDIS_URL", "TORCHYARD_STORAGE_URL", "CHECKPOINT_DIR", "USE_S3", "JOB_ID", "WORLD_SIZE")}
    full_env.update({
        "HOST": host,
        "PORT": str(port),
        "TORCHYARD_DATA_DIR": str(data_dir),
        "TORCHYARD_ADMIN_USER": ADMIN[0],
        "TORCHYARD_ADMIN_PASSWORD": ADMIN[1],
        "TORCHYARD_LOCAL_AGENTS": str(agents),
        # Quicker sweeps so lost-node checks do not dominate test time.
        "TORCHYARD_SUPERVISE_EVERY": "1",
        # A node that never answers a stop (its agent died) is written off after 10 s, not 30: no
        # test is about that wait, and several meet it on their way.
        "TORCHYARD_STOP_TIMEOUT": "10",
        # Every browser case signs in through the login page, all from 127.0.0.1: a module of them
        # can pass the default 10 sign-ins a minute (tests/accounts/test_sign_in_limits.py tests the limit).
        "TORCHYARD_LOGIN_RATE": "600/minute",
        **env,
    })
    with open(log_path, "wb") as log:
        process = subprocess.Popen([SERVER, "run", *args], cwd=str(ROOT), env=full_env, stdout=log,
                                   stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    stack = Stack(base=f"http://{host}:{port}", data_dir=data_dir, log_path=log_path, process=process)
    try:
        stack.wait_ready(machines=agents)
    except BaseException:
        stack.stop()
        raise
    ledger.record_stack("start", time.monotonic() - started_at)
    return stack


def start_pg_stack(tmp: Path, *, agents: int = 2, redis_offset: int = redis_databases.OWN_PG_STACK,
                   args: tuple[str, ...] = ()) -> Stack:
    """The production-shaped stack: PostgreSQL (a new database) and the machine's Redis (its database
    REDIS_URL's + `redis_offset`, this pytest-xdist worker's, emptied first: tests/redis_databases.py),
    `agents` local agents.
    Stop it with stop_pg_stack."""
    name = unique_name("torchyard_it")
    create_database(name)
    redis_url = redis_databases.offset_database(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/9"),
                                                redis_databases.stack_offset(redis_offset))
    redis.Redis.from_url(redis_url).flushdb()
    try:
        stack = start_stack(tmp, agents=agents, args=args,
                            env={"DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{name}", "REDIS_URL": redis_url})
    except BaseException:
        drop_database(name)
        raise
    stack.database = name
    return stack


def stop_pg_stack(stack: Stack) -> None:
    try:
        stack.stop()
    finally:
        drop_database(stack.database)


def unique_name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


__all__ = ["Stack", "start_pg_stack", "start_stack", "stop_pg_stack", "unique_name", "protocol"]

"""`torchyard agent`: join the cluster with a machine token and serve this machine's queue."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import os
import re
import signal
import socket
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any, TypedDict

import redis
from celery import Celery

import torchyard
from torchyard import lifeline, protocol, tls
from torchyard.bundles.cache import BundleSource
from torchyard.node.versions import PreflightError, training_versions
from torchyard.protocol import NodeLaunch
from torchyard.stream_contract import JobEvent
from torchyard.warm.pools import WarmPools

from . import capabilities, health, runs, stacks, warm
from .memory import MemoryHolder, MemoryServer
from .standby import StandbySupervisor


class TrainingVersions(TypedDict):
    """The training Python's versions, in the machine's capabilities (protocol.Capabilities)."""

    python_version: str
    torch_version: str


log = logging.getLogger("torchyard.agent")
HEARTBEAT_EVERY = 2.0
HOSTNAME = re.compile(r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*\.?$")


class AgentError(RuntimeError):
    """A problem the user must fix (bad token, unreachable server); printed without a traceback."""


def parse_addr(text: str) -> str:
    """`--addr`: the host the other machines reach this one at (a name, an IPv4 or IPv6 address).

    The Go scheduler's worker takes HOST:PORT, the port its own server listens on (0: any). The
    agent connects out to the server, a job's ports come from the server's range, and its one
    listening port, its memory-checkpoint store's, is --memory-port's; so HOST:0 is HOST and any
    other port is refused rather than ignored. ValueError says what is wrong."""
    text = text.strip()
    host, port = text, None
    if text.startswith("["):  # [IPv6]:PORT
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError("expected HOST, or [IPv6 address]:0")
        port = rest[1:] if rest else None
    elif text.count(":") == 1:
        host, port = text.split(":")
    if port is not None and port != "0":
        raise ValueError(f"the agent connects out to the server and the jobs' ports come from the server's range; "
                         f"its one listening port is set with --memory-port: give --addr {host or 'HOST'} without "
                         f":{port}")
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        if HOSTNAME.match(host):
            return host
    raise ValueError(f"{host!r} is not a host name or an IP address")


def fetch_config(server: str, token: str, timeout: float = 10.0, ca_file: str | None = None) -> protocol.AgentConfig:
    """Ask the server for this machine's id and the Redis URL, authenticated by the token (over
    HTTPS, `ca_file` is trusted beside the system's authorities)."""
    request = urllib.request.Request(
        server.rstrip("/") + "/api/agent/config", headers={"Authorization": f"Machine {token}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=tls.https_context(ca_file)) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        if exc.code == 401:
            raise AgentError("the server does not know this machine token (was the machine deleted?)") from exc
        raise AgentError(f"{server} answered {exc.code} to /api/agent/config") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise AgentError(f"cannot reach {server}: {exc}") from exc


class Agent:
    def __init__(self, *, token: str, redis_url: str, work_dir: Path, concurrency: int = 4,
                 server_url: str = "", python: str = "", volumes: dict[str, str] | None = None,
                 gpus: capabilities.GpuDeclaration | None = None, ca_file: str | None = None, addr: str = "",
                 memory_port: int = 0):
        # Started by `torchyard-server run`: end with it; and before the warm pools copy the
        # environment, drop what marks a control-plane process (what it starts is training).
        lifeline.watch_launcher()
        lifeline.forget_control_plane_identity()
        self.machine_id, _ = protocol.parse_machine_token(token)
        # The address the other machines reach this one at (--addr): every heartbeat sets the
        # machine's host to it; "" leaves the host it was registered with.
        self.addr = addr
        # The GPUs jobs may use when the agent declares them (--gpus, --models, --memories): they
        # replace NVML's in every heartbeat.
        self.gpus = gpus
        # Named host paths (--volume NAME=PATH) jobs may ask for; each heartbeat says which exist.
        self.volumes = dict(volumes or {})
        self.token = token
        self.redis_url = redis_url
        self.server_url = server_url
        self.ca_file = ca_file  # the private authority the server's HTTPS certificate comes from
        # The Python the ranks run with: the machine's training environment, which may not be ours.
        self.python = python
        self.work_dir = work_dir
        self.concurrency = concurrency
        self.queue = protocol.machine_queue(self.machine_id)
        # This machine's own streams: the control plane accepts nothing about another machine's
        # nodes from them.
        self.event_stream = protocol.machine_event_stream(self.machine_id)
        self.liveness_stream = protocol.machine_liveness_stream(self.machine_id)
        self.shutdown_reason = ""
        self.redis = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=5)
        self.stop = threading.Event()
        self.app = self._make_app()
        self.training = self._training_versions()
        # Warm interpreters (torchyard.warm): a fork server for the training Python, and for each job
        # environment a node asks for; kept up by the heartbeat loop.
        self.pools = WarmPools(self.work_dir / "cache")
        self.pools.want(self.python or sys.executable)
        # A node supervisor started ahead, imports done, for the next launch (agent/standby.py).
        self.standby = StandbySupervisor(self.work_dir / "standby")
        # The memory checkpoints this machine holds for its jobs, served on --memory-port (0: any),
        # which the heartbeats report (agent/memory.py).
        self.memory = MemoryHolder()
        self.memory_server = self._memory_server(memory_port)

    def _memory_server(self, port: int) -> MemoryServer:
        """The memory store on `port`, or without one on the port this machine's agent had before (kept
        in the work dir): launches sent before a restart's first heartbeat name that port, and a
        firewall rule made for it stays right. A port taken since is given up for a free one."""
        remembered = self.work_dir / "memory-port"
        if not port:
            with contextlib.suppress(OSError, ValueError):  # none kept, or taken since
                return MemoryServer(self.memory, int(remembered.read_text().strip()))
        server = MemoryServer(self.memory, port)  # OSError: --memory-port is taken (cli.py says so)
        with contextlib.suppress(OSError):
            self.work_dir.mkdir(parents=True, exist_ok=True)
            remembered.write_text(str(server.port))
        return server

    def _training_versions(self) -> TrainingVersions:
        """The training Python's and its torch's versions, read once: the plan shows whether the
        machines of a job agree, before any node's preflight has to refuse it."""
        try:
            found = training_versions(self.python or sys.executable)
        except PreflightError as exc:
            log.warning("%s", exc)
            return {"python_version": "", "torch_version": ""}
        return {"python_version": found.python, "torch_version": found.torch}

    # --- events ---------------------------------------------------------------------------------
    def publish(self, event: JobEvent) -> None:
        event.setdefault("key", uuid.uuid4().hex)
        self.redis.xadd(self.event_stream, protocol.encode_event(event),
                        maxlen=protocol.EVENT_STREAM_MAXLEN, approximate=True)

    def heartbeat_once(self) -> None:
        beat: protocol.MachineHeartbeat = {
            "type": protocol.MACHINE_HEARTBEAT,
            "machine": self.machine_id,
            "token": self.token,
            "hostname": socket.gethostname(),
            "agent_version": torchyard.__version__,
            "capabilities": {**capabilities.capabilities(str(self.work_dir), self.volumes, self.gpus), **self.training,
                             "memory_port": self.memory_server.port},
            "cache": warm.cache_summary(self.work_dir / "cache"),
            "load": capabilities.load(self.gpus),
            "running": runs.running_nodes(self.work_dir),
            "ts": time.time(),
        }
        if self.addr:
            beat["host"] = self.addr
        self.redis.xadd(self.liveness_stream, protocol.encode_event(beat),
                        maxlen=protocol.LIVENESS_STREAM_MAXLEN, approximate=True)

    def _heartbeat_loop(self) -> None:
        while not self.stop.is_set():
            for part, maintain in (("warm pools", self.pools.maintain), ("standby supervisor", self.standby.maintain)):
                try:
                    maintain()
                except Exception:  # what cannot start must never stop the heartbeats
                    log.exception(part)
            try:
                self.heartbeat_once()
            except redis.RedisError as exc:
                log.warning("heartbeat failed: %s", exc)
            self.stop.wait(HEARTBEAT_EVERY)

    # --- Celery ---------------------------------------------------------------------------------
    def _make_app(self) -> Celery:
        app = Celery(f"torchyard-agent-{self.machine_id}", broker=self.redis_url)
        app.conf.update(
            task_default_queue=self.queue,
            task_ignore_result=True,
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
            worker_prefetch_multiplier=1,
            # The tasks it took and has not finished wait under keys of its own, not in the shared
            # `unacked` hash that holds every client's: a per-agent Redis user reaches only these.
            broker_transport_options=protocol.machine_unacked_keys(self.machine_id),
        )

        @app.task(name=protocol.TASK_LAUNCH_NODE)
        def launch_node(launch: dict[str, Any]) -> runs.Launched:
            node = NodeLaunch.from_dict(launch)
            node.redis_url = self.redis_url
            node.server_url = self.server_url
            node.machine_token = self.token
            node.python = self.python
            node.cache_dir = str(self.work_dir / "cache")
            if node.memory.get("key"):
                # Its ranks and its buddies' may store the job's memory checkpoints here from now on.
                self.memory.admit(node.job_id, node.memory["key"], int(node.memory.get("budget") or 0))
            result = runs.launch_node(self.work_dir, node, self.publish, self.standby)
            log.info("launch job %s attempt %s node %s: %s", node.job_id, node.attempt, node.node_rank, result)
            return result

        @app.task(name=protocol.TASK_STOP_NODE)
        def stop_node(job_id: int, attempt: int, node_rank: int, node_id: int) -> runs.Stopped:
            result = runs.stop_node(self.work_dir, job_id, attempt, node_rank, node_id, self.publish)
            log.info("stop job %s attempt %s node %s: %s", job_id, attempt, node_rank, result)
            return result

        @app.task(name=protocol.TASK_PREEMPT_NODE)
        def preempt_node(job_id: int, attempt: int, node_rank: int, grace: float,
                         reason: str = "") -> runs.PreemptionRequested:
            # Idempotent: a redelivered request keeps the first one's clock.
            result = runs.request_preemption(self.work_dir, job_id, attempt, node_rank, grace=grace, reason=reason)
            log.info("preempt job %s attempt %s node %s: %s", job_id, attempt, node_rank, result)
            return result

        @app.task(name=protocol.TASK_UPDATE_PEERS)
        def update_peers(job_id: int, attempt: int, node_rank: int,
                         membership: protocol.Membership) -> runs.PeersWritten:
            # Idempotent: an older version (a redelivery, or two updates taken by two threads) never
            # replaces a newer one.
            return runs.write_peers(self.work_dir, job_id, attempt, node_rank, membership)

        @app.task(name=protocol.TASK_FREE_MEMORY)
        def free_memory(job_id: int) -> int:
            # The job ended: what this machine held of its memory checkpoints goes.
            freed = self.memory.free(job_id)
            log.info("job %s ended: %d bytes of memory checkpoints freed", job_id, freed)
            return freed

        @app.task(name=protocol.TASK_WARM_CACHES)
        def warm_caches(code: protocol.BundleRef, pip: list[str], pool: bool = False) -> warm.WarmResult:
            # pool: a job's hot spare, which also keeps a warm pool of the environment's Python.
            source = BundleSource(code, self.server_url, self.token)
            result = warm.warm_caches(self.work_dir / "cache", source, pip, self.python, pool=pool)
            log.info("prepared dependencies of bundle %s: %s", str(code.get("bundle"))[:12], result)
            return result

        @app.task(name=protocol.TASK_HEALTH_CHECK)
        def health_check() -> protocol.HealthReport:
            # The machine is quarantined and its probation is over: the control plane releases it on a pass.
            gpus = int(capabilities.capabilities(str(self.work_dir), self.volumes, self.gpus).get("gpu_count") or 0)
            result = health.run_checks(self.python or sys.executable, self.work_dir,
                                       health.own_address(self.server_url), gpus=gpus)
            log.info("health check: %s", "passed" if result["ok"] else f"failed: {result['checks']}")
            if self.server_url:
                health.report(self.server_url, self.token, result, self.ca_file)
            return result

        @app.task(name=protocol.TASK_DUMP_STACKS)
        def dump_stacks(job_id: int, attempt: int, node_rank: int, node_id: int, request: str) -> int:
            # `torchyard stacks JOB`: where each rank of this node is, read from outside.
            return stacks.publish_stacks(job_id, attempt, node_rank, node_id, request, self.publish,
                                         self.work_dir / "runs")

        @app.task(name=protocol.TASK_SHUTDOWN)
        def shutdown(reason: str = "") -> None:
            # The machine is gone from the control plane: serve nothing more. SIGTERM is Celery's
            # warm shutdown (the tasks already running finish); run() then exits.
            self.shutdown_reason = reason or "the machine was removed from the control plane"
            log.warning("shutdown requested by the control plane: %s", self.shutdown_reason)
            self.stop.set()
            os.kill(os.getpid(), signal.SIGTERM)

        return app

    def run(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        capabilities.load()  # prime psutil's cpu_percent so the first heartbeat has a real number
        reattached = runs.running_nodes(self.work_dir)
        if reattached:
            log.info("re-attached to %d running node(s): %s", len(reattached), reattached)
        self.memory_server.start()
        log.info("memory checkpoints served on port %d", self.memory_server.port)
        beat = threading.Thread(target=self._heartbeat_loop, daemon=True, name="heartbeat")
        beat.start()
        try:
            self.app.worker_main([
                "worker", "-Q", self.queue, "-P", "threads", "-c", str(self.concurrency),
                "-n", f"agent-{self.machine_id}@{socket.gethostname()}",
                # No worker events (gossip, mingle, heartbeats): nothing reads them, and the
                # agent's Redis user may not publish them. Remote control (ping) stays.
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO",
            ])
        finally:
            self.stop.set()
            self.memory_server.shutdown()
            self.memory_server.server_close()
            self.pools.close()
            self.standby.close()
            if self.shutdown_reason:
                # A restarted agent is refused anyway: the token no longer authenticates.
                log.error("agent of machine %s stopped: %s; its token is no longer valid",
                          self.machine_id, self.shutdown_reason)

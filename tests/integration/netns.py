"""Hosts that are really apart: one network namespace per host, joined by a bridge on this machine.

    with separate_hosts(tmp_path, hosts=3) as cluster:
        cluster.stack.submit(spec)             # the Torchyard stack, on the bridge address
        cluster.hosts[1].link_down()           # a partition (link_up() ends it: a blip)
        cluster.hosts[2].kill_agent()          # kill -9 of that host's agent
        cluster.hosts[0].processes()           # what runs "on" host 0
        cluster.redis.restart()                # the private Redis, stopped and started again

Each host is a network namespace with a veth pair: the host end is a port of the bridge, the inside
end (named eth0 in every namespace, as on real hosts) has the host's own address. The web process
and a private Redis (append-only file on, so a restart keeps streams and queues) listen on the
bridge address; every host registers a machine whose `host` is
its namespace address and runs `torchyard agent --server URL --token T` inside its namespace, so
rendezvous, collectives, heartbeats and events all cross the bridge. The filesystem is shared, so
the default file:// checkpoint store under the stack's data dir plays the shared filesystem.

Needs root and `ip` (see `netns_unavailable`). Everything created is removed on the way out, also
when the test fails: every process inside the namespaces (all started here) is killed by PID, then
the namespaces, veth pairs, bridge, the stack, Redis and the PostgreSQL database go.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import redis_databases

from .databases import create_database, drop_database
from .stack import ROOT, Stack, start_stack

BIN = Path(sys.executable).parent
# Namespace addresses are 10.231.<n>.0/24 with <n> picked at random among the unused ones, so two
# runs (a developer's and CI's) on one machine do not collide.
NET_PREFIX = "10.231"
INSIDE_IFNAME = "eth0"
FABRIC_IFNAME = "eth1"  # Cluster.second_network's


def netns_unavailable() -> str:
    """Why this machine cannot run the separate-hosts tests ("" when it can): for a skip reason."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    if not shutil.which("ip"):
        return "the `ip` command (iproute2) is missing"
    if not shutil.which("redis-server"):
        return "redis-server is missing (the private Redis must listen on the bridge address)"
    return ""


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ip ARGS...` as an argument list; raises with ip's own message when `check` and it fails."""
    result = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and result.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {result.stderr.strip()}")
    return result


def free_subnet() -> str:
    """A 10.231.<n> prefix no interface or route of this machine mentions, among this pytest-xdist
    worker's: worker gwK picks an <n> with n % 4 == K, so two workers making clusters at the same
    moment cannot pick the same one (tests/redis_databases.py numbers the workers)."""
    used = ip("-4", "-o", "addr").stdout + ip("-4", "route").stdout
    quarter = redis_databases.worker_index() % 4
    candidates = [n for n in range(2, 255) if n % 4 == quarter and f"{NET_PREFIX}.{n}." not in used]
    if not candidates:
        raise RuntimeError(f"no free {NET_PREFIX}.x.0/24 subnet")
    return f"{NET_PREFIX}.{random.choice(candidates)}"


def _netns_inode(name: str) -> int:
    # /run/netns/<name> is a bind mount of the namespace's nsfs file: same inode as /proc/<pid>/ns/net.
    return os.stat(f"/run/netns/{name}").st_ino


def _processes_in(inode: int) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter():
        try:
            if os.stat(f"/proc/{proc.pid}/ns/net").st_ino == inode and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except (OSError, psutil.Error):
            continue  # gone meanwhile
    return found


@dataclass
class Host:
    """One host: a network namespace with its own address, a registered machine and its agent."""

    index: int
    netns: str
    veth: str  # the host end, a port of the bridge
    address: str
    server: str
    work_dir: Path
    machine_id: int = 0
    machine_name: str = ""
    token: str = ""
    agent: subprocess.Popen | None = None
    agent_log: Path | None = None
    volumes: dict[str, str] = field(default_factory=dict)  # the agent's --volume NAME=PATH
    _inode: int = 0

    # --- the network ----------------------------------------------------------------------------
    def link_down(self) -> None:
        """Take the host's link down (the bridge side of its veth): nothing reaches it or leaves it,
        and connections time out. Left down, it is a partition; followed by link_up(), a blip."""
        ip("link", "set", self.veth, "down")

    def link_up(self) -> None:
        """Bring the host's link back; traffic flows again within a second."""
        ip("link", "set", self.veth, "up")

    @contextlib.contextmanager
    def throttled(self, ifname: str = INSIDE_IFNAME, rate: str = "50mbit") -> Iterator[None]:
        """Everything the host sends on `ifname` limited to `rate` by a token bucket (tc tbf) for
        the block: a slow link, up and working."""
        ip("netns", "exec", self.netns, "tc", "qdisc", "add", "dev", ifname, "root", "tbf", "rate", rate,
           "burst", "32kbit", "latency", "400ms")
        try:
            yield
        finally:
            ip("netns", "exec", self.netns, "tc", "qdisc", "del", "dev", ifname, "root", check=False)

    def sent_bytes(self, ifname: str) -> int:
        """Bytes this host has sent on `ifname`, the kernel's counter."""
        shown = json.loads(ip("-n", self.netns, "-j", "-s", "link", "show", "dev", ifname).stdout)
        return int(shown[0]["stats64"]["tx"]["bytes"])

    def can_reach(self, address: str, port: int, timeout: float = 2.0) -> bool:
        """Whether a TCP connect from inside this host to address:port succeeds (there is no ping)."""
        probe = ("import socket,sys\n"
                 "try:\n"
                 f"    socket.create_connection(({address!r}, {port}), timeout={timeout}).close()\n"
                 "except OSError:\n"
                 "    sys.exit(1)\n")
        result = subprocess.run(["ip", "netns", "exec", self.netns, sys.executable, "-c", probe],
                                capture_output=True, timeout=timeout + 30)
        return result.returncode == 0

    # --- processes ------------------------------------------------------------------------------
    def start_agent(self) -> None:
        """Start `torchyard agent --server URL --token T` inside the namespace (again, after
        kill_agent(): it re-attaches to the node supervisors still running there)."""
        env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL", "TORCHYARD_STORAGE_URL")}
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.agent_log = self.work_dir.parent / f"{self.work_dir.name}-agent.log"
        with open(self.agent_log, "ab") as log:
            # `ip netns exec` execs the agent in place: the Popen pid is the agent's own.
            self.agent = subprocess.Popen(
                ["ip", "netns", "exec", self.netns, str(BIN / "torchyard"), "agent", "--server", self.server,
                 "--token", self.token, "--work-dir", str(self.work_dir),
                 *(f"--volume={name}={path}" for name, path in self.volumes.items())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True, cwd=str(ROOT),
            )

    def kill_agent(self) -> None:
        """kill -9 of the agent alone: its node supervisors and training go on without it."""
        if self.agent is not None and self.agent.poll() is None:
            self.agent.send_signal(signal.SIGKILL)
            self.agent.wait(timeout=30)

    def processes(self) -> list[psutil.Process]:
        """Every live process whose network namespace is this host's: what runs "on" this host."""
        return _processes_in(self._inode)

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP every process of the host (its agent, supervisors, ranks) for the block: a host
        that hangs whole, its links up and its processes alive; SIGCONT afterwards, whatever happened."""
        stopped: list[psutil.Process] = []
        try:
            for _ in range(3):  # a supervisor forking at the moment: its child is caught the next round
                for proc in self.processes():
                    if proc not in stopped:
                        with contextlib.suppress(psutil.Error):
                            proc.suspend()
                            stopped.append(proc)
            yield
        finally:
            for proc in stopped:
                with contextlib.suppress(psutil.Error):
                    proc.resume()

    def agent_log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.agent_log.read_text(errors="replace").splitlines()[-lines:]) if self.agent_log else ""
        except OSError:
            return ""

    def kill_everything(self, timeout: float = 20.0) -> None:
        """SIGKILL every process inside the namespace (all of them were started by this fixture),
        until none is left: a supervisor may still be forking when the first round lands."""
        deadline = time.monotonic() + timeout
        while True:
            left = self.processes()
            if not left:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"processes left in {self.netns}: {[p.pid for p in left]}")
            for proc in left:
                with contextlib.suppress(psutil.Error):
                    proc.kill()
            psutil.wait_procs(left, timeout=3)
        if self.agent is not None:
            self.agent.wait(timeout=10)  # reap our own child


@dataclass
class Cluster:
    """The stack on the bridge and the hosts around it."""

    stack: Stack
    hosts: list[Host]
    bridge: str
    gateway: str  # the bridge's address: where the web process and Redis listen
    redis_url: str
    database: str
    redis: RedisServer | None = None
    by_machine: dict[int, Host] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None  # set by open_cluster: removes everything

    def host_of(self, machine_id: int) -> Host:
        """The host whose machine has this id (plans and nodes name machines by id)."""
        return self.by_machine[machine_id]

    @property
    def web_port(self) -> int:
        return int(self.stack.base.rsplit(":", 1)[1])

    def machine(self, host: Host) -> dict:
        """The machine of `host` as the API shows it."""
        response = self.stack.api("GET", f"/api/machines/{host.machine_id}")
        response.raise_for_status()
        return response.json()

    def settle(self, timeout: float = 60.0) -> None:
        """Make the cluster as separate_hosts made it, for the next test or module: every link up,
        every agent running (started again where a case killed it), no live job, each machine
        online, not drained, not quarantined. Raises shared.Unrepairable when that does not hold in time."""
        from . import shared

        deadline = time.monotonic() + timeout
        for host in self.hosts:
            host.link_up()
            if host.agent is None or host.agent.poll() is not None:
                host.start_agent()
        shared.stop_live_jobs(self.stack, deadline)

        def machines() -> list[dict]:
            return [self.machine(host) for host in self.hosts]

        for machine in machines():
            shared.undo_marks(self.stack, machine)
        shared.until(deadline, lambda: all(m["status"] == "online" and not m["drained"] and not m.get("quarantined_at")
                                           for m in machines()),
                     lambda: "hosts not back online: " + ", ".join(
                         f"{m['name']} {m['status']}" for m in machines()) + f"\n{self.hosts[-1].agent_log_tail(10)}")

    @contextlib.contextmanager
    def second_network(self, ifname: str = FABRIC_IFNAME) -> Iterator[str]:
        """A second network between the hosts for the block, as a fabric beside the management
        Ethernet: a bridge with no address on this machine (the stack is not on it), each host an
        address on it on `ifname`; yields its prefix ("10.231.<n>": host i is .10+i). The hosts
        keep registering their eth0 addresses."""
        tag = self.bridge.removeprefix("ty").removesuffix("br")
        subnet, bridge = free_subnet(), f"ty{tag}fb"
        with contextlib.ExitStack() as cleanup:
            ip("link", "add", bridge, "type", "bridge")
            cleanup.callback(ip, "link", "del", bridge, check=False)
            ip("link", "set", bridge, "up")
            for host in self.hosts:
                veth = f"ty{tag}f{host.index}"
                ip("link", "add", veth, "type", "veth", "peer", "name", ifname, "netns", host.netns)
                cleanup.callback(ip, "link", "del", veth, check=False)
                ip("link", "set", veth, "master", bridge)
                ip("link", "set", veth, "up")
                ip("-n", host.netns, "addr", "add", f"{subnet}.{10 + host.index}/24", "dev", ifname)
                ip("-n", host.netns, "link", "set", ifname, "up")
            yield subnet

    def wait_machine(self, host: Host, statuses: set[str], timeout: float = 60.0) -> dict:
        """Poll the machine of `host` until its status is one of `statuses`."""
        deadline = time.monotonic() + timeout
        machine = self.machine(host)
        while machine["status"] not in statuses:
            if time.monotonic() > deadline:
                raise AssertionError(f"{host.machine_name} is {machine['status']} after {timeout:.0f}s, wanted "
                                     f"{statuses}\n--- agent log ---\n{host.agent_log_tail()}\n"
                                     f"--- stack log ---\n{self.stack.log_tail(30)}")
            time.sleep(0.3)
            machine = self.machine(host)
        return machine


@dataclass
class RedisServer:
    """A private redis-server on the bridge address. torchyard_server.runtime.embedded_redis binds
    127.0.0.1 only, which the namespaces cannot reach, hence this one. It keeps an append-only
    file, so restart() is a Redis restart as production sees one: streams, consumer groups and
    queued tasks survive it."""

    address: str
    workdir: Path
    port: int = 0
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"redis://{self.address}:{self.port}/0"

    @property
    def agent_url(self) -> str:
        """What the server hands agents (TORCHYARD_AGENT_REDIS_URL): the same server, as they see it."""
        return self.url

    def start(self, timeout: float = 10.0) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = self.port or _free_port(self.address)
        self.proc = subprocess.Popen(
            ["redis-server", "--bind", self.address, "--port", str(self.port), "--save", "",
             "--appendonly", "yes", "--appendfsync", "everysec",
             "--dir", str(self.workdir), "--logfile", str(self.workdir / "redis.log"),
             # Bound to the bridge alone; protected mode would refuse the namespaces (not loopback).
             "--protected-mode", "no"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"redis-server exited with {self.proc.returncode}; see {self.workdir / 'redis.log'}")
            try:
                with socket.create_connection((self.address, self.port), timeout=0.5) as s:
                    s.sendall(b"PING\r\n")
                    # Answers -LOADING while it replays the append-only file.
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                pass
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"redis-server on {self.address}:{self.port} did not answer within {timeout:.0f}s")

    def stop(self) -> None:
        """SIGTERM (Redis flushes its append-only file on the way out), SIGKILL after 10 s."""
        if self.proc is not None:
            _stop(self.proc)

    def restart(self, down_s: float = 1.0) -> None:
        """Stop it, leave it down for `down_s`, start it again on the same port and files."""
        self.stop()
        time.sleep(down_s)
        self.start()


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((address, 0))
        return s.getsockname()[1]


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _add_host(index: int, tag: str, subnet: str, bridge: str, server: str, data_dir: Path,
              cleanup: contextlib.ExitStack) -> Host:
    netns, veth = f"ty{tag}h{index}", f"ty{tag}v{index}"
    host = Host(index=index, netns=netns, veth=veth, address=f"{subnet}.{10 + index}", server=server,
                work_dir=data_dir / "hosts" / f"host-{index}")
    ip("netns", "add", netns)
    cleanup.callback(ip, "netns", "del", netns, check=False)
    host._inode = _netns_inode(netns)
    # The peer is created inside the namespace, so every host can call it eth0. Deleting the host
    # end deletes the pair (the namespace going also would, but the link may outlive it briefly).
    ip("link", "add", veth, "type", "veth", "peer", "name", INSIDE_IFNAME, "netns", netns)
    cleanup.callback(ip, "link", "del", veth, check=False)
    ip("link", "set", veth, "master", bridge)
    ip("link", "set", veth, "up")
    ip("-n", netns, "addr", "add", f"{host.address}/24", "dev", INSIDE_IFNAME)
    ip("-n", netns, "link", "set", INSIDE_IFNAME, "up")
    ip("-n", netns, "link", "set", "lo", "up")
    # No default route on purpose: the /24 is on-link, which reaches the bridge address (web, Redis)
    # and the other hosts, and nothing in a namespace can send to any other address.
    # Processes go before their namespace (registered last, so it runs first).
    cleanup.callback(host.kill_everything)
    return host


def open_cluster(tmp: Path, hosts: int = 3) -> Cluster:
    """separate_hosts, held open until `cluster.close()`: the cluster a pytest session shares."""
    exits = contextlib.ExitStack()
    cluster = exits.enter_context(separate_hosts(tmp, hosts))
    cluster.close = exits.close
    return cluster


@contextlib.contextmanager
def separate_hosts(tmp: Path, hosts: int = 2, *, env: dict[str, str] | None = None,
                   volumes: list[dict[str, str]] | None = None,
                   redis_factory: Callable[[str, Path], RedisServer] = RedisServer) -> Iterator[Cluster]:
    """A bridge, `hosts` namespaces with a registered machine and an online agent each, and a
    Torchyard stack (PostgreSQL database of its own, private Redis) that they reach over the
    bridge. `env` adds to the stack's environment; `volumes[i]` are host i's agent's --volume
    declarations (name: path); `redis_factory(address, workdir)` makes the private Redis (a TLS
    one: test_remote_agent_tls.py). Everything is removed on exit."""
    reason = netns_unavailable()
    if reason:
        raise RuntimeError(reason)
    tag = uuid.uuid4().hex[:4]
    subnet = free_subnet()
    gateway, bridge = f"{subnet}.1", f"ty{tag}br"
    database = f"torchyard_netns_{tag}"
    with contextlib.ExitStack() as cleanup:
        ip("link", "add", bridge, "type", "bridge")
        cleanup.callback(ip, "link", "del", bridge, check=False)
        ip("addr", "add", f"{gateway}/24", "dev", bridge)
        ip("link", "set", bridge, "up")

        redis_server = redis_factory(gateway, tmp / "redis")
        redis_server.start()
        cleanup.callback(redis_server.stop)  # the current process, also after restarts
        redis_url = redis_server.url

        create_database(database)
        cleanup.callback(drop_database, database)

        stack = start_stack(tmp, host=gateway, agents=0, env={
            "DATABASE_URL": f"postgresql://postgres@127.0.0.1:5432/{database}",
            "REDIS_URL": redis_url,
            # What /api/agent/config hands the agents (the same server, named for them).
            "TORCHYARD_AGENT_REDIS_URL": redis_server.agent_url,
            **(env or {}),
        })
        cleanup.callback(stack.stop)

        cluster = Cluster(stack=stack, hosts=[], bridge=bridge, gateway=gateway, redis_url=redis_url,
                          database=database, redis=redis_server)
        for index in range(hosts):
            host = _add_host(index, tag, subnet, bridge, stack.base, stack.data_dir, cleanup)
            cluster.hosts.append(host)
            created = stack.api("POST", "/api/machines", json={"name": f"host-{index}", "host": host.address})
            assert created.status_code == 201, created.text
            body = created.json()
            host.machine_id, host.machine_name, host.token = body["id"], body["name"], body["token"]
            cluster.by_machine[host.machine_id] = host
            host.volumes = dict((volumes or [])[index]) if index < len(volumes or []) else {}
            host.start_agent()
        for host in cluster.hosts:
            cluster.wait_machine(host, {"online"})
        yield cluster

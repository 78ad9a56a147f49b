"""Preflight: before torchrun starts, every node proves it can reach the master and trains with the
same Python and torch.

Without it a node that cannot reach the master's address (a wrong registered address, a firewall,
a route missing) or that runs another torch makes torchrun's rendezvous hang for minutes and then
fail with a timeout that names nothing. Here the failure names the node, the address and the cause
within seconds.

The check uses the very address and port torchrun will use: the master node's supervisor listens on
the master port from the moment it starts (the kernel completes a peer's TCP handshake even while
the master is still preparing its code), every other node connects, which proves the path, and
sends one line saying who it is and what it runs. The master answers each line once it is itself
ready, then closes the port and hands it to torchrun's store. The exchange is a probe, not a
transport: one JSON line each way, before any rank exists. When the job's links are to be measured
(links.py), the answer carries the roster instead, and two more lines follow on the same connection:
the node's figures, then the master's report with the network the job is pinned to.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypedDict, cast

from torchyard.node.versions import PreflightError, Versions
from torchyard.protocol import AddressInfo, NodeVolume
from torchyard.stream_contract import LinkReport

from . import links as link_probes
from .links import MeasuredPair, Roster
from .volumes import VolumeProbe, unshared

PROTOCOL = "torchyard-preflight/1"
# No route, host unreachable, timed out: the master's address cannot be reached from here.
UNREACHABLE_AFTER_S = 10.0
# Connection refused: the address answers but nothing listens. The master's supervisor may start a
# little after this one (its agent received the launch later), so this gets longer.
NOTHING_LISTENS_AFTER_S = 30.0
# A hello names up to 16 volumes with their probe files (volumes.py).
MAX_LINE_BYTES = 65536
# The master's report names every pair of up to a few hundred nodes: its own, larger limit.
MAX_REPORT_BYTES = 8 << 20
# How long the master waits for a node's link figures beyond the burst itself: it then chooses with
# what it has (the missing pairs make their networks unusable, never the preflight fail).
FIGURES_GRACE_S = 10.0

class Hello(TypedDict, total=False):
    """A node's first line to the master: who it is, its versions and volumes' probes, and (links
    measured) where to probe it. Read by the master as any peer's line: each field is checked."""

    protocol: str
    job: int
    attempt: int
    node_rank: int
    hostname: str
    interface: str
    python: str
    torch: str
    warm: bool
    machine: str
    volumes: list[VolumeProbe]
    probe_port: int
    addresses: list[AddressInfo]
    stack: str


class Reply(TypedDict, total=False):
    """A line the master sends a node: its answer (ok, or an error, `permanent` when a relaunch would
    meet it again; whether the job starts warm; the roster when the links are measured), then the
    link report (`links`). A node sends its figures back (`figures`)."""

    ok: bool
    error: str
    permanent: bool
    warm: bool
    roster: dict[str, link_probes.RosterEntry]
    links: LinkReport
    figures: list[MeasuredPair]


def release(version: str) -> str:
    """A version without its local build tag: 2.13.0+cu128 and 2.13.0+cpu are one release."""
    return version.split("+", 1)[0]


def disagreement(master: Versions, peer: Versions) -> str:
    """Why two nodes cannot train together ("" when they can): torch must be the same release (its
    collectives and checkpoint formats are only promised within one; CPU and CUDA builds of it may
    mix under gloo), Python the same minor version."""
    if release(master.torch) != release(peer.torch) or master.python.split(".")[:2] != peer.python.split(".")[:2]:
        return f"the master has {master.describe()}, this node {peer.describe()}"
    return ""


def _cause(exc: BaseException) -> str:
    """The reason in the words `ip` and the kernel use: "no route to host", "connection refused"."""
    if isinstance(exc, TimeoutError):
        return "timed out"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror.lower()
    return str(exc) or type(exc).__name__


@dataclass
class LinkProbe:
    """This node's part in measuring the job's links (links.py): its probe port and addresses, the
    burst's length; `report` is the master's once the exchange is over (None: nothing was measured)."""

    port: int
    addresses: list[AddressInfo]
    seconds: float
    stack: str = ""  # node.network.network_stack(): nodes on one stack have no link between them
    report: LinkReport | None = None
    one_stack: bool = False  # the master's word: every node shares one stack, nothing was measured

    def hello(self) -> Hello:
        return {"probe_port": self.port, "addresses": self.addresses, "stack": self.stack}


@dataclass
class Reached:
    """What a node that is not the master learnt: how long the handshake took and through what."""

    master: str
    local_address: str
    connect_ms: float
    waited_s: float
    warm: bool = False  # the master's word: every node of the job starts warm
    links: LinkReport | None = field(default=None, repr=False)  # the master's link report


# `tick(phase)` is the supervisor's: heartbeats, stop checks (it raises to abort), status updates.
Tick = Callable[[str], None]


def _reply(sock: socket.socket, answer: Reply) -> None:
    _send(sock, _line(answer))


def _line(answer: Reply | Hello) -> bytes:
    return (json.dumps(answer) + "\n").encode()


def _send(sock: socket.socket, line: bytes) -> None:
    with contextlib.suppress(OSError):
        sock.setblocking(True)
        sock.settimeout(2.0)
        sock.sendall(line)


def reach_master(address: str, port: int, hello: Hello, tick: Tick,
                 *, unreachable_after: float = UNREACHABLE_AFTER_S,
                 nothing_listens_after: float = NOTHING_LISTENS_AFTER_S, links: LinkProbe | None = None) -> Reached:
    """Connect to the master's preflight listener, introduce this node, wait for its answer (and,
    with `links`, measure this node's share of the pairs and wait for the master's report).

    Raises PreflightError naming the address and the cause when the master cannot be reached in
    time or refuses this node (another job on that port, other versions)."""
    target = f"{address}:{port}"
    started = time.monotonic()
    last_error: BaseException | None = None
    sock: socket.socket | None = None
    while sock is None:
        elapsed = time.monotonic() - started
        refused = isinstance(last_error, ConnectionRefusedError)
        limit = nothing_listens_after if refused else unreachable_after
        if last_error is not None and elapsed >= limit:
            raise PreflightError(f"cannot reach the master at {target}: {_cause(last_error)} "
                                 f"(tried for {elapsed:.0f} s)")
        attempt_started = time.monotonic()
        try:
            sock = _connect(address, port, deadline=started + limit, tick=tick)
        except OSError as exc:
            last_error = exc
            # A refusal answers at once: do not spin. A timeout already waited.
            time.sleep(max(0.0, 0.2 - (time.monotonic() - attempt_started)))
    connect_ms = (time.monotonic() - attempt_started) * 1000
    local_address = sock.getsockname()[0]
    report = None
    try:
        introduced: Hello = {"protocol": PROTOCOL, **hello, **(links.hello() if links else {})}
        sock.sendall(_line(introduced))
        sock.setblocking(False)
        answer = _read_line(sock, tick, "waiting for the master to be ready")
        if answer is not None and answer.get("ok") and isinstance(answer.get("roster"), dict) and links is not None:
            report = _exchange_figures(sock, answer, hello, links, tick)
    except OSError as exc:
        answer, closed = None, f" ({_cause(exc)})"
    else:
        closed = ""
    finally:
        sock.close()
    if answer is None:
        raise PreflightError(f"the master at {target} closed the preflight connection without an answer"
                             f"{closed}: is something else listening on that port?")
    if not answer.get("ok"):
        raise PreflightError(str(answer.get("error") or f"the master at {target} refused this node"),
                             permanent=answer.get("permanent") is True)
    if links is not None:
        links.report = report
    return Reached(master=target, local_address=local_address, connect_ms=round(connect_ms, 1),
                   waited_s=round(time.monotonic() - started, 2), warm=answer.get("warm") is True, links=report)


def _exchange_figures(sock: socket.socket, answer: Reply, hello: Hello, links: LinkProbe,
                      tick: Tick) -> LinkReport | None:
    """A node's side of the link measurement: probe its share of the pairs, send the figures, read
    the master's report (None when the master sent none)."""
    roster: Roster = {int(rank): node for rank, node in answer.get("roster", {}).items()}
    figures = _ticking(lambda: link_probes.measure(roster, int(hello.get("node_rank", 0)), links.seconds), tick,
                       "measuring the links to the other nodes")
    sock.setblocking(True)
    sock.settimeout(5.0)
    sock.sendall(_line({"figures": figures}))
    sock.setblocking(False)
    final = _read_line(sock, tick, "waiting for the master's link report", limit=MAX_REPORT_BYTES)
    report = final.get("links") if final is not None else None
    return report if isinstance(report, dict) else None


def _ticking(work: Callable[[], list[MeasuredPair]], tick: Tick, phase: str) -> list[MeasuredPair]:
    """`work()` in a thread while this one keeps ticking (heartbeats, stop checks)."""
    value: list[list[MeasuredPair]] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            value.append(work())
        except BaseException as exc:  # handed to the caller's thread
            error.append(exc)

    worker = threading.Thread(target=run, name="preflight-links", daemon=True)
    worker.start()
    while worker.is_alive():
        tick(phase)
        worker.join(timeout=0.1)
    if error:
        raise error[0]
    return value[0] if value else []


def _connect(address: str, port: int, *, deadline: float, tick: Tick) -> socket.socket:
    """A TCP connection, ticking while it is under way; raises the kernel's own error (no route to
    host after ARP gave up, refused, unreachable), or TimeoutError at the deadline."""
    infos = socket.getaddrinfo(address, port, socket.AF_INET, socket.SOCK_STREAM)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setblocking(False)
        code = sock.connect_ex(infos[0][4])
        with selectors.DefaultSelector() as selector:
            selector.register(sock, selectors.EVENT_WRITE)
            while code in (errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK):
                tick("reaching the master")
                if time.monotonic() >= deadline:
                    raise TimeoutError("timed out")
                if selector.select(timeout=0.1):
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code:
            raise OSError(code, os.strerror(code))
    except BaseException:
        sock.close()
        raise
    return sock


def _read_line(sock: socket.socket, tick: Tick, phase: str, *, limit: int = MAX_LINE_BYTES) -> Reply | None:
    """The master's next line, ticking meanwhile; None when it closed first (or sent no JSON object).
    What it holds crosses the network: each field is checked where it is read."""
    buffer = b""
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        while b"\n" not in buffer:
            tick(phase)
            if not selector.select(timeout=0.1):
                continue
            chunk = sock.recv(MAX_LINE_BYTES)
            if not chunk:
                return None
            buffer += chunk
            if len(buffer) > limit:
                raise PreflightError("preflight answer too long")
    line = buffer.split(b"\n", 1)[0]
    try:
        data = json.loads(line)
    except ValueError:
        return None
    # The master's line, as it sent it: each field is checked where it is read.
    return cast("Reply", data) if isinstance(data, dict) else None


class MasterListener:
    """The master node's side: listen on the master port at once, answer every peer once ready."""

    def __init__(self, port: int) -> None:
        """Binds now; raises PreflightError when the port is taken (torchrun's store could not bind it)."""
        self.port = port
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # SO_REUSEADDR ignores TIME_WAIT leftovers, which do not stop torchrun's store either.
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._sock.bind(("", port))
            self._sock.listen(256)
        except OSError as exc:
            self._sock.close()
            raise PreflightError(f"master port {port} in use on this host ({_cause(exc)})") from exc
        self._sock.setblocking(False)

    def close(self) -> None:
        self._sock.close()

    def serve(self, *, job_id: int, attempt: int, peers: set[int], versions: Versions,
              tick: Tick, volumes: list[NodeVolume] | None = None,
              machine: str = "", warm: bool = False, links: LinkProbe | None = None,
              master_addr: str = "", machines: dict[int, str] | None = None) -> dict[int, Hello]:
        """Answer peers once every node rank in `peers` has checked in; returns their hellos.

        A peer of another job or attempt is told so at once and ignored (it is not one of ours). A
        peer whose versions differ, or who wrote a ReadWriteMany volume's probe file that is not in
        this machine's path of it (`volumes`, this node's launch's), is told why and the preflight
        fails here too: neither may start. The others are answered together once all are there, with
        whether the job starts warm: only when every node can (`warm` here, "warm" in each hello);
        a warm rank and a cold torchrun do not rendezvous alike. With `links` (and every peer
        offering a probe port), the answer carries the roster, every node measures its share of the
        pairs, and the master answers again with its report (`links.report`; links.py)."""
        waiting = set(peers)
        seen: dict[int, Hello] = {}
        pending: dict[int, socket.socket] = {}
        buffers: dict[socket.socket, bytes] = {}
        with selectors.DefaultSelector() as selector:
            selector.register(self._sock, selectors.EVENT_READ)
            try:
                while waiting:
                    tick(f"waiting for node(s) {', '.join(map(str, sorted(waiting)))} to reach the master")
                    for key, _ in selector.select(timeout=0.1):
                        sock = key.fileobj
                        assert isinstance(sock, socket.socket)
                        if sock is self._sock:
                            with contextlib.suppress(BlockingIOError, InterruptedError):
                                conn, _ = self._sock.accept()
                                conn.setblocking(False)
                                buffers[conn] = b""
                                selector.register(conn, selectors.EVENT_READ)
                            continue
                        hello = self._read_hello(sock, buffers, selector)
                        if hello is None:
                            continue
                        rank = self._answer(sock, hello, job_id=job_id, attempt=attempt, versions=versions,
                                            volumes=volumes or [], machine=machine)
                        selector.unregister(sock)
                        buffers.pop(sock, None)
                        if rank is None or (rank not in waiting and rank not in pending):
                            _reply(sock, {"ok": rank is not None, "error": "not a node this master waits for"})
                            sock.close()
                            continue
                        if rank in pending:
                            pending[rank].close()  # it reconnected: answer the newer connection
                        pending[rank] = sock
                        waiting.discard(rank)
                        seen[rank] = hello
                decision = warm and all(hello.get("warm") is True for hello in seen.values())
                roster = _roster(links, seen) if links is not None else None
                if links is not None and roster is not None:
                    links.one_stack = link_probes.pairs_apart(roster) == 0
                if links is not None and roster is not None and not links.one_stack:
                    # One line for every peer, encoded once (the links report grows with the square of the nodes).
                    go = _line({"ok": True, "warm": decision, "roster": {str(rank): node for rank, node in roster.items()}})
                    for sock in pending.values():
                        _send(sock, go)
                    links.report = _gather_links(pending, roster, links, tick, master_addr=master_addr,
                                                 machines=machines or {})
                    report = _line({"links": links.report})
                    for sock in pending.values():
                        _send(sock, report)
                else:
                    go = _line({"ok": True, "warm": decision})
                    for sock in pending.values():
                        _send(sock, go)
            except PreflightError as exc:
                for sock in pending.values():
                    _reply(sock, {"ok": False, "error": f"the master's preflight failed: {exc}",
                                  "permanent": exc.permanent})
                raise
            finally:
                for conn in [*buffers, *pending.values()]:
                    conn.close()
        return seen

    @staticmethod
    def _read_hello(sock: socket.socket, buffers: dict[socket.socket, bytes],
                    selector: selectors.BaseSelector) -> Hello | None:
        try:
            chunk = sock.recv(MAX_LINE_BYTES)
        except (BlockingIOError, InterruptedError):
            return None
        except OSError:
            chunk = b""
        data = buffers.get(sock, b"") + chunk
        if not chunk or len(data) > MAX_LINE_BYTES:  # closed, or not a preflight client
            selector.unregister(sock)
            buffers.pop(sock, None)
            sock.close()
            return None
        if b"\n" not in data:
            buffers[sock] = data
            return None
        try:
            hello = json.loads(data.split(b"\n", 1)[0])
        except ValueError:
            hello = None
        # A peer's line, as it sent it: _answer checks each field it reads.
        return cast("Hello", hello) if isinstance(hello, dict) else {}

    @staticmethod
    def _answer(sock: socket.socket, hello: Hello, *, job_id: int, attempt: int,
                versions: Versions, volumes: list[NodeVolume] | None = None, machine: str = "") -> int | None:
        """Reply to one hello; the node rank it accounts for, or None. Raises on a version mismatch."""

        if hello.get("protocol") != PROTOCOL or hello.get("job") != job_id or hello.get("attempt") != attempt:
            _reply(sock, {"ok": False, "error": f"this master port serves job {job_id} attempt {attempt}, not "
                                                f"job {hello.get('job')} attempt {hello.get('attempt')}"})
            return None
        rank = hello.get("node_rank")
        theirs = Versions(python=str(hello.get("python") or "?"), torch=str(hello.get("torch") or ""))
        problem = disagreement(versions, theirs)
        if problem:
            who = f"node {rank} ({hello.get('hostname') or 'unknown host'})"
            _reply(sock, {"ok": False, "error": f"versions disagree: {problem}", "permanent": True})
            raise PreflightError(f"versions disagree: this node (the master) has {versions.describe()}, "
                                 f"{who} has {theirs.describe()}", permanent=True)
        problem = unshared(volumes or [], hello, machine=machine)
        if problem:
            _reply(sock, {"ok": False, "error": problem, "permanent": True})
            raise PreflightError(problem, permanent=True)
        return rank if isinstance(rank, int) else None  # answered with the others (serve)


def _roster(links: LinkProbe, seen: dict[int, Hello]) -> Roster | None:
    """Every node's probe port, addresses and network stack, the master's first; None when a node
    sent no probe port (nothing is measured then)."""
    ports = {rank: port for rank, hello in seen.items() if isinstance(port := hello.get("probe_port"), int)}
    if len(ports) < len(seen):
        return None
    return {0: {"probe_port": links.port, "addresses": links.addresses, "stack": links.stack,
                "hostname": socket.gethostname()},
            **{rank: {"probe_port": ports[rank], "addresses": list(hello.get("addresses") or []),
                      "stack": str(hello.get("stack") or ""), "hostname": hello.get("hostname", "")}
               for rank, hello in seen.items()}}


def _gather_links(pending: dict[int, socket.socket], roster: Roster, links: LinkProbe,
                  tick: Tick, *, master_addr: str, machines: dict[int, str]) -> LinkReport:
    """The master's side of the link measurement: its own share of the pairs, measured while every
    node's figures arrive, then the report (links.choose). A node that sends nothing in time leaves
    its pairs unmeasured, which only keeps their networks from being chosen."""
    started = time.monotonic()
    own: list[MeasuredPair] = []
    worker = threading.Thread(target=lambda: own.extend(link_probes.measure(roster, 0, links.seconds)),
                              name="preflight-links", daemon=True)
    worker.start()
    figures: list[MeasuredPair] = []
    waiting = dict(pending)
    buffers = {sock: b"" for sock in waiting.values()}
    deadline = started + links.seconds + FIGURES_GRACE_S
    with selectors.DefaultSelector() as selector:
        for rank, sock in waiting.items():
            sock.setblocking(False)
            selector.register(sock, selectors.EVENT_READ, rank)
        while waiting and time.monotonic() < deadline:
            tick("measuring the links between the nodes")
            for key, _ in selector.select(timeout=0.1):
                conn, rank = key.fileobj, key.data
                assert isinstance(conn, socket.socket)
                try:
                    chunk = conn.recv(MAX_LINE_BYTES)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    chunk = b""
                buffers[conn] += chunk
                if chunk and b"\n" not in buffers[conn] and len(buffers[conn]) <= MAX_REPORT_BYTES:
                    continue
                selector.unregister(conn)
                waiting.pop(rank, None)
                with contextlib.suppress(ValueError, AttributeError):
                    sent = json.loads(buffers[conn].split(b"\n", 1)[0]).get("figures")
                    figures += [f for f in sent or [] if link_probes.well_formed(f, rank)]
    while worker.is_alive():
        tick("measuring the links between the nodes")
        worker.join(timeout=0.1)
    figures += own
    return link_probes.choose(roster, figures, master_addr=master_addr, machines=machines,
                              seconds=time.monotonic() - started)

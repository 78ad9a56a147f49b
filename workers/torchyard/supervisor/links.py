"""Links: the preflight measures every pair of a job's machines on every network they share, and
pins the job's traffic to the network whose slowest pair is fastest.

A machine with two networks (a management Ethernet and a fast fabric) resolves its name to one of
them, and every byte of a job then takes whatever that is: the worst recovery reported for torchft
(948 s to heal) was checkpoint traffic on Ethernet beside an idle InfiniBand, found and fixed by hand.
Nothing in torchrun or Ray measures the links between a job's nodes.

How (preflight.py carries it): every node opens a probe port (ProbeServer) and names it, with its
IPv4 addresses, in its hello; once every node has checked in, the master hands out the roster; each
node probes its share of the pairs (`my_peers`: every pair once, the work spread evenly) on every
network all nodes share, all at once, for a short burst: the latency is the median TCP round trip of
a few one-byte pings, the bandwidth what the peer received over the burst. Each node sends its figures
to the master, which builds the matrix (`choose`), names the pairs below half the median, and answers
every node with the chosen network. Each node then binds its ranks' process group (GLOO_SOCKET_IFNAME,
NCCL_SOCKET_IFNAME) and their rendezvous (MASTER_ADDR: the master's address on that network) to it.
A relaunch on machines already measured reuses the choice (NodeLaunch.links) and probes nothing, so
recovery pays nothing for it. The figures never fail a preflight: a network with a pair that cannot
connect is simply not chosen, and with none usable the job keeps the routed default.

Nodes on one machine's network stack (agents side by side on one host, the embedded mode) are never
measured against each other: their bytes stay on the machine whatever address they dial. A job whose
nodes all share one stack measures nothing and pins nothing; its ranks keep the master's address (a
loopback one), and never an interface that another program owns and may remove under the job.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import socket
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, NotRequired, TypedDict, TypeGuard

from torchyard.protocol import AddressInfo
from torchyard.stream_contract import LinkNetwork, LinkPair, LinkReport

PING = b"p"
BULK = b"b"
PINGS = 5
CHUNK = 1 << 20
# A probe connection is closed after this long whatever it does: the port serves only the preflight.
CONNECTION_LIMIT_S = 15.0
# A network is chosen over the one the master's address is on only when its slowest pair is this much
# faster: two networks within noise of each other keep the registered one (and its firewall rules).
PREFER_REGISTERED = 1.1
# A pair is flagged below this share of the median bandwidth of every pair on every network.
FLAG_BELOW = 0.5


class RosterEntry(TypedDict):
    """A node in the master's roster (preflight.py): where to probe it, and on which stack it is."""

    probe_port: int
    addresses: list[AddressInfo]
    stack: str  # node.network.network_stack(): nodes on one stack have nothing between them
    hostname: NotRequired[str]


# Node rank -> its entry.
Roster = dict[int, RosterEntry]


class PairFigures(TypedDict, total=False):
    """One probe's figures (latency, bandwidth), or why there are none (`error`)."""

    latency_ms: float
    bytes: int
    mb_per_s: float
    error: str


class MeasuredPair(TypedDict):
    """A pair a node probed on one network (a: itself, b: the peer) with its figures (PairFigures):
    what it sends the master, which flags it into the report (stream_contract.LinkPair)."""

    network: str
    a: int
    b: int
    latency_ms: NotRequired[float]
    bytes: NotRequired[int]
    mb_per_s: NotRequired[float]
    error: NotRequired[str]


def burst_seconds(nnodes: int) -> float:
    """How long each probe streams: short for a small job, longer for a big one, whose all-at-once
    probes share each machine's link between more peers (8 machines: 1 s, within the 10 s asked)."""
    return round(min(1.0, 0.2 + 0.1 * nnodes), 2)


def address_on(addresses: list[AddressInfo], network: str) -> AddressInfo | None:
    return next((a for a in addresses if a.get("network") == network), None)


def network_of(addresses: list[AddressInfo], address: str) -> str:
    """The network of `addresses` that holds `address` ("" when none does)."""
    try:
        wanted = ipaddress.ip_address(address)
    except ValueError:
        return ""
    for entry in addresses:
        with contextlib.suppress(ValueError, KeyError):
            if wanted in ipaddress.ip_network(entry["network"]):
                return str(entry["network"])
    return ""


def shared_networks(roster: Roster) -> list[str]:
    """The networks on which every node of the roster has an address, in the master's order."""
    if not roster:
        return []
    first = roster[min(roster)]
    return [a["network"] for a in first.get("addresses", [])
            if all(address_on(node.get("addresses", []), a["network"]) for node in roster.values())]


def together(roster: Roster, a: int, b: int) -> bool:
    """Whether nodes `a` and `b` share one network stack (node/network.py network_stack: one
    machine, one namespace): nothing between them to measure."""
    stack = roster[a].get("stack")
    return bool(stack) and stack == roster[b].get("stack")


def pairs_apart(roster: Roster) -> int:
    """How many pairs of the roster's nodes are on different network stacks (each is measured)."""
    ranks = sorted(roster)
    return sum(not together(roster, a, b) for i, a in enumerate(ranks) for b in ranks[i + 1:])


def my_peers(ranks: list[int], me: int) -> list[int]:
    """The peers node `me` probes: each pair of `ranks` once, every node probing about half of the
    others (node i probes the next n/2 in ring order), so no node sends much more than another."""
    n = len(ranks)
    mine = ranks.index(me)
    peers = []
    for distance in range(1, n // 2 + 1):
        peer = ranks[(mine + distance) % n]
        if 2 * distance == n and peer < me:
            continue  # opposite nodes of an even ring: the lower rank probes
        peers.append(peer)
    return peers


# --- The probe port ---------------------------------------------------------------------------------
class ProbeServer:
    """Answers pings and counts a burst's bytes for every peer that probes this node, on every
    interface, on a port of its own, from before the hello until the preflight is over."""

    def __init__(self) -> None:
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("", 0))
        self._sock.listen(64)
        self._sock.settimeout(0.2)
        self.port: int = self._sock.getsockname()[1]
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="link-probe", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=2)
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="link-probe-peer", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        until = time.monotonic() + CONNECTION_LIMIT_S
        with conn:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with contextlib.suppress(OSError):
                while time.monotonic() < until:
                    conn.settimeout(max(0.1, until - time.monotonic()))
                    head = conn.recv(1)
                    if head == PING:
                        conn.sendall(PING)
                    elif head == BULK:
                        self._count(conn, until)
                        return
                    else:
                        return

    @staticmethod
    def _count(conn: socket.socket, until: float) -> None:
        received, started = 0, time.monotonic()
        while time.monotonic() < until:
            conn.settimeout(max(0.1, until - time.monotonic()))
            chunk = conn.recv(CHUNK)
            if not chunk:
                break
            received += len(chunk)
        seconds = time.monotonic() - started
        conn.sendall((json.dumps({"bytes": received, "seconds": round(seconds, 4)}) + "\n").encode())


# --- Probing ----------------------------------------------------------------------------------------
def probe(local: str, remote: str, port: int, seconds: float) -> PairFigures:
    """One pair on one network, from this node's `local` address: {"latency_ms", "mb_per_s", "bytes"},
    or {"error"} in the kernel's words."""
    try:
        with socket.create_connection((remote, port), timeout=3.0, source_address=(local, 0)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            round_trips = []
            for _ in range(PINGS):
                started = time.perf_counter()
                sock.sendall(PING)
                if sock.recv(1) != PING:
                    return {"error": "the peer's probe port did not answer a ping"}
                round_trips.append(time.perf_counter() - started)
            sock.sendall(BULK)
            _burst(sock, seconds)
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(CONNECTION_LIMIT_S)
            reply = b""
            while not reply.endswith(b"\n"):
                chunk = sock.recv(4096)
                if not chunk:
                    break
                reply += chunk
    except OSError as exc:
        return {"error": (exc.strerror or str(exc) or type(exc).__name__).lower()}
    try:
        counted = json.loads(reply)
        received, took = int(counted["bytes"]), float(counted["seconds"])
    except (ValueError, KeyError, TypeError):
        return {"error": "the peer's probe port sent no count"}
    return {"latency_ms": round(statistics.median(round_trips) * 1000, 3), "bytes": received,
            "mb_per_s": round(received / max(took, 1e-6) / 1e6, 1)}


def _burst(sock: socket.socket, seconds: float) -> None:
    """Send for `seconds`: each send waits at most until the deadline, so a slow link stops on time."""
    payload = memoryview(bytes(CHUNK))
    deadline = time.monotonic() + seconds
    while (left := deadline - time.monotonic()) > 0:
        sock.settimeout(left)
        try:
            sock.send(payload)
        except TimeoutError:
            break


def measure(roster: Roster, me: int, seconds: float) -> list[MeasuredPair]:
    """This node's share of the pairs on every shared network, all probed at once."""
    own = roster[me].get("addresses", [])
    tasks = []
    for network in shared_networks(roster):
        local = address_on(own, network)
        for peer in my_peers(sorted(roster), me):
            if together(roster, me, peer):
                continue
            remote = address_on(roster[peer].get("addresses", []), network)
            if local and remote:
                tasks.append((network, peer, local["address"], remote["address"], int(roster[peer]["probe_port"])))
    if not tasks:
        return []
    with ThreadPoolExecutor(max_workers=len(tasks), thread_name_prefix="link-probe") as pool:
        figures = list(pool.map(lambda task: probe(task[2], task[3], task[4], seconds), tasks))
    return [{"network": network, "a": me, "b": peer, **figure}
            for (network, peer, _, _, _), figure in zip(tasks, figures, strict=True)]


# --- The master's choice ----------------------------------------------------------------------------
def well_formed(figure: object, rank: int) -> TypeGuard[MeasuredPair]:
    """Whether a node's figure is one the master can use: a pair it probed itself, with numbers or an
    error (a node's figures cross the network like any input)."""
    if not isinstance(figure, dict) or figure.get("a") != rank or not isinstance(figure.get("b"), int):
        return False
    if not isinstance(figure.get("network"), str):
        return False
    if isinstance(figure.get("error"), str):
        return True
    return all(isinstance(figure.get(k), int | float) and not isinstance(figure.get(k), bool)
               for k in ("mb_per_s", "latency_ms"))


def choose(roster: Roster, measured: list[MeasuredPair], *, master_addr: str,
           machines: dict[int, str], seconds: float) -> LinkReport:
    """The job's link report (stream_contract.LinkReport): every pair's figures, the networks with
    their slowest pair, the pairs flagged below half the median, the chosen network and why."""
    networks = shared_networks(roster)
    master = roster[min(roster)]
    registered = network_of(master.get("addresses", []), master_addr)
    rates = [rate for p in measured if (rate := p.get("mb_per_s")) is not None]
    median = statistics.median(rates) if rates else None
    pairs: list[LinkPair] = [{**pair, "flagged": bool(median and (rate := pair.get("mb_per_s")) is not None
                                                      and rate < FLAG_BELOW * median)} for pair in measured]
    expected = pairs_apart(roster)
    rows: list[LinkNetwork] = []
    for network in networks:
        mine = [p for p in pairs if p["network"] == network]
        rates = [rate for p in mine if (rate := p.get("mb_per_s")) is not None]
        latencies = [p.get("latency_ms", 0.0) for p in mine if p.get("mb_per_s") is not None]
        usable = len(rates) == expected and expected > 0
        rows.append({
            "network": network,
            "interfaces": {str(rank): _on(node, network, "interface") for rank, node in sorted(roster.items())},
            "slowest_mb_per_s": min(rates) if rates else None,
            "latency_ms": statistics.median(latencies) if latencies else None,
            "usable": usable, "registered": network == registered, "chosen": False,
        })
    chosen = _pick([r for r in rows if r["usable"]], registered)
    if chosen is not None:
        chosen["chosen"] = True
    return {
        "seconds": round(seconds, 2),
        "machines": {str(rank): machines.get(rank, "") for rank in sorted(roster)},
        "networks": rows,
        "pairs": pairs,
        "median_mb_per_s": median,
        "chosen": chosen["network"] if chosen else "",
        "addresses": ({machines.get(rank, str(rank)): _on(node, chosen["network"], "address")
                       for rank, node in sorted(roster.items())} if chosen else {}),
        "master_address": _on(master, chosen["network"], "address") if chosen else "",
        "summary": summarize(rows, pairs, machines, median, chosen),
    }


def _on(node: RosterEntry, network: str, field: Literal["interface", "address"]) -> str:
    """The node's interface or address on `network` ("" when it has none there)."""
    found = address_on(node.get("addresses", []), network)
    return found.get(field, "") if found is not None else ""


def _pick(usable: list[LinkNetwork], registered: str) -> LinkNetwork | None:
    if not usable:
        return None
    best = max(usable, key=lambda r: r["slowest_mb_per_s"] or 0.0)
    home = next((r for r in usable if r["network"] == registered), None)
    if home is not None and (best["slowest_mb_per_s"] or 0.0) <= PREFER_REGISTERED * (home["slowest_mb_per_s"] or 0.0):
        return home
    return best


def _between(pair: LinkPair, machines: dict[int, str]) -> str:
    a, b = (machines.get(pair[end]) or f"node {pair[end]}" for end in ("a", "b"))
    return f"{a} and {b}"


def summarize(rows: list[LinkNetwork], pairs: list[LinkPair], machines: dict[int, str],
              median: float | None, chosen: LinkNetwork | None) -> str:
    """The report in one paragraph, for the preflight's log line and the job page."""
    parts = []
    for row in rows:
        name = f"{row['network']} ({'/'.join(sorted(set(filter(None, row['interfaces'].values())))) or '?'})"
        if row["slowest_mb_per_s"] is None:
            parts.append(f"{name}: not measured")
            continue
        parts.append(f"{name}: slowest pair {row['slowest_mb_per_s']:g} MB/s, {row['latency_ms']:g} ms"
                     + ("" if row["usable"] else ", a pair could not connect"))
    for pair in pairs:
        if pair.get("error"):
            parts.append(f"{pair['network']} between {_between(pair, machines)}: {pair['error']}")
        elif pair.get("flagged"):
            parts.append(f"{pair['network']} between {_between(pair, machines)}: {pair['mb_per_s']:g} MB/s, "
                         f"below half the median ({median:g} MB/s)")
    head = (f"traffic pinned to {chosen['network']}" if chosen else
            "no network every pair could use: traffic takes the routed default")
    return f"{head}. " + "; ".join(parts)

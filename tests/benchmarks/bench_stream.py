"""Benchmark `stream`: the event path from ranks to browsers, through a real stack, against the raw
Redis + PostgreSQL ceiling measured in the same run.

A job of 2 nodes x 4 ranks (a plain script under torchrun, no torch) on `torchyard-server run` with two
local agents, followed by 20 WebSocket clients (`/api/jobs/{id}/stream`) and 2 Server-Sent-Events
clients (`/api/jobs/{id}/logs/stream`; measured only where the route exists). Every line a rank
prints starts with the time it was written, so a client knows each line's delay from the rank's
write to its own receipt. Two phases, each started by a file the ranks wait for:

  paced  5,000 lines/s in all for 30 s: the delay of every line to every client, p50 and p99, and
         the rate stored: the lines over the time from the start to when the last was stored
         (seen to within 20 ms, new ids counted as they come: a slower poll misread it by 2%).
  flood  every rank prints its share of (ceiling x 60 s) lines as fast as it can (the supervisors
         read the files at their own pace): the rate at which events are stored in PostgreSQL over
         the first 60 s, against the ceiling.

The ceiling: the same events (a log line event as a supervisor builds it), pipelined XADDs from one
process into the stack's Redis while this one reads them (XREADGROUP, 1,000 at a time) and COPYs
them into a table like streaming_jobevent (its indexes, no foreign keys), committing and XACKing
each batch: no Torchyard code. Checked as well: no event lost or repeated (every node's seq 1..n,
every rank line once, every client every event once and in order), no node declared lost, and the
peak memory of every process of the stack (its Redis included) while it floods, and the CPU time
each kind of process spent per stored event (the bench's clients included).

    make bench BENCH=stream
    python tests/benchmarks/run.py stream -- --paced-seconds 10 --flood-lines 200000   # quicker
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
from integration.databases import database  # noqa: E402
from integration.stack import Stack, start_stack, unique_name  # noqa: E402
from stream_clients import Follower, follow_sse, follow_ws  # noqa: E402
from torchyard.bundles import pack_directory  # noqa: E402

NODES, PROCS = 2, 4
RANKS = NODES * PROCS
WS_CLIENTS, SSE_CLIENTS = 20, 2
PACED_RATE = 5_000  # lines/s, all ranks together
PACED_S = 30.0
WINDOW_S = 60.0  # the flood is sized for this long at the ceiling, and its rate measured over it
PAD = 64  # a line is ~100 bytes: "<ts> r<rank> f<n> " and this many x
TARGET_RATIO = 0.5
TARGET_P99_S = 0.250
TARGET_PACED_STORED = 4_950  # lines/s: the paced rate kept up with, to within 1%
RSS_CAP_MB = 512
SSE_PATH = "/api/jobs/{job}/logs/stream"
STAMPED = "^[0-9.]+ r[0-9]+ [{phase}][0-9]+ "  # a line of the rank script's phase(s)

RANK_SCRIPT = '''\
"""One rank of the stream bench: a ready line, then paced lines, then a flood; each line starts with
the time it was written. Each phase waits for its file in the gate folder."""
import os
import sys
import time

gate, rate, paced_s, flood, pad = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
rank = int(os.environ["RANK"])
out = sys.stdout
tail = "x" * pad


def wait(name):
    while not os.path.exists(os.path.join(gate, name)):
        time.sleep(0.02)


print(f"ready r{rank}", flush=True)
wait("paced")
total, sent, start = int(rate * paced_s), 0, time.time()
while sent < total:
    due = min(total, int((time.time() - start) * rate) + 1)
    while sent < due:
        out.write(f"{time.time():.6f} r{rank} p{sent} {tail}\\n")
        sent += 1
    out.flush()
    time.sleep(0.002)
wait("flood")
write, clock = out.write, time.time
for i in range(flood):
    write(f"{clock():.6f} r{rank} f{i} {tail}\\n")
out.flush()
wait("end")
'''


# --- the stack and its database ------------------------------------------------------------------
@contextlib.contextmanager
def stream_stack(work: Path) -> Iterator[tuple[Stack, str]]:
    """launch_common.bench_stack, also handing back the database URL: the bench reads the
    stored events straight from PostgreSQL."""
    with database(unique_name("torchyard_bench")) as url:
        (work / "stack").mkdir(parents=True, exist_ok=True)
        stack = start_stack(work / "stack", env={"DATABASE_URL": url})
        try:
            yield stack, url
        finally:
            stack.stop()


def stack_redis_url(stack: Stack) -> str:
    """The Redis the launcher started for itself, as its ingest child was told (with the password)."""
    for proc in psutil.Process(stack.process.pid).children():
        with contextlib.suppress(psutil.Error):
            if "ingest_events" in proc.cmdline():
                return proc.environ()["REDIS_URL"]
    raise AssertionError("the stack runs no ingest child")


# --- the raw ceiling -----------------------------------------------------------------------------
def sample_event(i: int) -> dict[str, Any]:
    """A log line event as a supervisor builds it (publisher.emit + _drain_local_sources)."""
    rank = i % RANKS
    now = time.time()
    return {"type": "log", "job": 1, "attempt": 0, "node": 1 + rank // PROCS, "node_rank": rank // PROCS,
            "rank": rank, "seq": i + 1, "ts": now, "stream": "stdout",
            "line": f"{now:.6f} r{rank} f{i} {'x' * PAD}", "local_rank": rank % PROCS, "source": "worker"}


def _produce(redis_url: str, stream: str, count: int) -> None:
    client = redis.Redis.from_url(redis_url)
    for start in range(0, count, 1000):
        pipe = client.pipeline(transaction=False)
        for i in range(start, min(count, start + 1000)):
            pipe.xadd(stream, {"e": json.dumps(sample_event(i), separators=(",", ":"))})
        pipe.execute()


def raw_ceiling(redis_url: str, database_url: str, count: int = 300_000) -> float:
    """Events/s of the minimal pipeline (module docstring): a producer process XADDing while this
    process reads, COPYs, commits and XACKs."""
    stream, group = f"bench:raw:{uuid.uuid4().hex[:8]}", "raw"
    client = redis.Redis.from_url(redis_url)
    client.xgroup_create(stream, group, id="0", mkstream=True)
    columns = "job_id, node_id, attempt, node_rank, rank, type, ts, payload, dedupe_key"
    envelope = {"type", "job", "attempt", "node", "node_rank", "rank", "seq", "ts"}
    with psycopg.connect(database_url) as conn:
        conn.execute("CREATE TABLE bench_raw_events (LIKE streaming_jobevent INCLUDING ALL)")
        conn.commit()
        try:
            producer = multiprocessing.get_context("spawn").Process(target=_produce, args=(redis_url, stream, count))
            started = time.perf_counter()
            producer.start()
            done = 0
            while done < count:
                reply = client.xreadgroup(group, "c", {stream: ">"}, count=1000, block=100)
                if not reply:
                    continue
                ids = [entry_id for entry_id, _ in reply[0][1]]
                events = [json.loads(fields[b"e"]) for _, fields in reply[0][1]]
                with conn.cursor() as cur, cur.copy(f"COPY bench_raw_events ({columns}) FROM STDIN") as copy:
                    for e in events:
                        payload = json.dumps({k: v for k, v in e.items() if k not in envelope})
                        copy.write_row((e["job"], e["node"], e["attempt"], e["node_rank"], e["rank"], e["type"],
                                        datetime.fromtimestamp(e["ts"], tz=UTC), payload, f"n{e['node']}:{e['seq']}"))
                conn.commit()
                pipe = client.pipeline(transaction=False)
                pipe.xack(stream, group, *ids)
                pipe.xdel(stream, *ids)
                pipe.execute()
                done += len(ids)
            elapsed = time.perf_counter() - started
            producer.join()
        finally:
            conn.rollback()
            conn.execute("DROP TABLE IF EXISTS bench_raw_events")
            conn.commit()
            client.delete(stream)
    return count / elapsed


# --- the job ------------------------------------------------------------------------------------
def submit_job(stack: Stack, work: Path, gate: Path, flood_per_rank: int, paced_s: float) -> int:
    project = work / "project"
    project.mkdir()
    (project / "lines.py").write_text(RANK_SCRIPT)
    packed = pack_directory(project, work / "bundle.tar.zst")
    with open(packed.path, "rb") as body:
        response = stack.api("PUT", f"/api/bundles/{packed.sha256}", data=body,
                             headers={"Content-Type": "application/octet-stream"})
    assert response.status_code in (200, 201), response.text
    job = stack.submit({
        "name": "bench-stream", "code": {"bundle": packed.sha256}, "entrypoint": "lines.py",
        "args": [str(gate), str(PACED_RATE / RANKS), str(paced_s), str(flood_per_rank), str(PAD)],
        "resources": {"nodes": NODES, "procs_per_node": PROCS}, "fault_tolerance": {"max_restarts": 0},
    })
    return int(job["id"])


class Store:
    """The stored events, straight from the bench's database."""

    def __init__(self, database_url: str, job_id: int) -> None:
        self.conn = psycopg.connect(database_url, autocommit=True)
        self.job_id = job_id

    def max_id(self, where: str = "TRUE") -> int:
        return self.conn.execute(f"SELECT coalesce(max(id), 0) FROM streaming_jobevent WHERE {where}").fetchone()[0]  # type: ignore[index]

    def count(self, where: str = "TRUE", *params: Any) -> int:
        return self.conn.execute(f"SELECT count(*) FROM streaming_jobevent WHERE job_id = %s AND {where}",
                                 (self.job_id, *params)).fetchone()[0]  # type: ignore[index]

    def lines(self, phase: str) -> int:
        """The stamped lines of a phase ("p" paced, "f" flood) stored."""
        return self.count("type = 'log' AND payload->>'line' ~ %s", STAMPED.format(phase=phase))

    def stored_all(self, phase: str, total: int, after: int, timeout: float, every: float = 0.02) -> float:
        """When the last of a phase's `total` stamped lines, all with ids above `after`, was stored,
        to within `every` s: the new ids since the last look (max(id), an index lookup) are
        counted every `every` s. (Ingest is the only writer and commits in id order.)"""
        deadline = time.monotonic() + timeout
        counted = 0
        while counted < total:
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s: {counted:,} of {total:,} {phase} lines stored")
            time.sleep(every)
            top = self.max_id()
            seen_at = time.time()
            counted += self.count("id > %s AND id <= %s AND type = 'log' AND payload->>'line' ~ %s",
                                  after, top, STAMPED.format(phase=phase))
            after = top
        return seen_at

    def logs_after(self, after: int) -> int:
        """Log events stored with an id above `after` (an index range: cheap enough to poll)."""
        return self.count("type = 'log' AND id > %s", after)

    def wait(self, what: str, predicate, timeout: float, poll: float = 0.5) -> float:
        """Poll until predicate() is true; the time it became so."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(poll)
        return time.time()

    def soundness(self) -> dict[str, Any]:
        """Every node's seq 1..n without a hole or a repeat; every stamped rank line once; lost nodes."""
        nodes = self.conn.execute(
            "SELECT node_id, count(*), count(DISTINCT dedupe_key), max(split_part(dedupe_key, ':', 2)::bigint) "
            "FROM streaming_jobevent WHERE job_id = %s AND dedupe_key LIKE 'n%%' GROUP BY node_id",
            (self.job_id,)).fetchall()
        lines = self.conn.execute(
            "SELECT rank, count(*), count(DISTINCT payload->>'line') FROM streaming_jobevent "
            "WHERE job_id = %s AND type = 'log' AND payload->>'line' ~ %s GROUP BY rank",
            (self.job_id, STAMPED.format(phase="pf"))).fetchall()
        lost = self.count("type = 'state' AND payload->>'status' = 'lost'")
        return {"nodes": nodes, "lines": lines, "lost": lost}


# --- memory ---------------------------------------------------------------------------------------
ROLES = (("daphne", "web"), ("ingest_events", "ingest"), ("beat", "beat"), ("worker", "controller"),
         ("torchyard.supervisor", "supervisor"), ("agent", "agent"), ("torchrun", "torchrun"),
         ("lines.py", "rank"), ("redis-server", "redis"))


def role(proc: psutil.Process) -> str | None:
    with contextlib.suppress(psutil.Error):
        argv = " ".join(proc.cmdline())
        for word, name in ROLES:
            if word in argv:
                return name
    return None


class MemoryWatch(threading.Thread):
    """Peak RSS by role of every process the stack started (its Redis included), sampled each second."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(stack.process.pid)
        self.peak: dict[str, float] = {}
        self.before: dict[str, float] = {}
        self.stop = threading.Event()

    def sample(self) -> dict[str, float]:
        seen: dict[str, float] = {}
        for proc in self.root.children(recursive=True):
            name = role(proc)
            with contextlib.suppress(psutil.Error):
                if name:
                    seen[name] = max(seen.get(name, 0.0), proc.memory_info().rss / 2**20)
        return seen

    def run(self) -> None:
        while not self.stop.wait(1.0):
            for name, mb in self.sample().items():
                self.peak[name] = max(self.peak.get(name, 0.0), mb)


def cpu_seconds(stack: Stack, database: str) -> dict[str, float]:
    """CPU seconds used so far by role: the stack's processes, the PostgreSQL backends serving its
    database, and this process (the bench's clients)."""
    used: dict[str, float] = {}

    def add(name: str, proc: psutil.Process) -> None:
        with contextlib.suppress(psutil.Error):
            times = proc.cpu_times()
            used[name] = used.get(name, 0.0) + times.user + times.system

    for proc in psutil.Process(stack.process.pid).children(recursive=True):
        if (name := role(proc)) is not None:
            add(name, proc)
    for proc in psutil.process_iter(["name", "cmdline"]):
        if proc.info["name"] == "postgres" and database in " ".join(proc.info["cmdline"] or []):
            add("postgres", proc)
    add("bench clients", psutil.Process())
    return used


# --- the clients ----------------------------------------------------------------------------------
class Clients(threading.Thread):
    """WS_CLIENTS WebSocket and SSE_CLIENTS SSE followers in one asyncio loop of their own."""

    def __init__(self, stack: Stack, job_id: int, ws: int, sse: int) -> None:
        super().__init__(daemon=True)
        self.stack, self.job_id = stack, job_id
        self.ws = [Follower(f"ws-{i}", "ws") for i in range(ws)]
        self.sse = [Follower(f"sse-{i}", "sse") for i in range(sse)]
        self.loop = asyncio.new_event_loop()
        self.stopping: asyncio.Event | None = None

    @property
    def all(self) -> list[Follower]:
        return self.ws + self.sse

    def run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_until_complete(self._main())

    async def _main(self) -> None:
        self.stopping = asyncio.Event()
        ws_url = self.stack.ws_url(f"/api/jobs/{self.job_id}/stream")
        sse_url = self.stack.base + SSE_PATH.format(job=self.job_id)
        tasks = [follow_ws(c, ws_url, self.stack.token, self.stopping) for c in self.ws]
        tasks += [follow_sse(c, sse_url, self.stack.token, self.stopping) for c in self.sse]
        await asyncio.gather(*tasks)

    def record(self, on: bool) -> None:
        for client in self.all:
            client.record = on

    def close(self) -> None:
        if self.stopping is not None:
            self.loop.call_soon_threadsafe(self.stopping.set)
        self.join(timeout=30)


def sse_route_exists(stack: Stack, job_id: int) -> bool:
    """The SSE log stream is another change's; without it the bench measures WebSockets only."""
    with contextlib.suppress(Exception):
        response = stack.api("GET", SSE_PATH.format(job=job_id), stream=True)
        response.close()
        return response.status_code == 200
    return False


# --- the run ------------------------------------------------------------------------------------
def rate_over(samples: list[tuple[float, int]], start: float, seconds: float) -> tuple[float, float]:
    """(events/s, seconds covered) between `start` and `start + seconds` (or the last sample)."""
    inside = [(t, n) for t, n in samples if start <= t <= start + seconds]
    if len(inside) < 2:
        return 0.0, 0.0
    (t0, n0), (t1, n1) = inside[0], inside[-1]
    return (n1 - n0) / (t1 - t0), t1 - t0


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISSED"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--paced-seconds", type=float, default=PACED_S)
    parser.add_argument("--flood-lines", type=int, default=0, help="lines in all (default: ceiling x 60 s)")
    parser.add_argument("--ws-clients", type=int, default=WS_CLIENTS)
    parser.add_argument("--sse-clients", type=int, default=SSE_CLIENTS)
    parser.add_argument("--drain-timeout", type=float, default=900.0)
    parser.add_argument("--keep", action="store_true", help="keep the work folder (the stack's log) afterwards")
    args = parser.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="bench-stream-"))
    gate = work / "gate"
    gate.mkdir()
    try:
        with stream_stack(work) as (stack, database_url):
            ceiling = raw_ceiling(stack_redis_url(stack), database_url)
            print(f"raw ceiling (pipelined XADD + XREADGROUP + COPY, no Torchyard code): {ceiling:,.0f} events/s",
                  flush=True)
            flood_total = args.flood_lines or int(ceiling * WINDOW_S)
            per_rank = -(-flood_total // RANKS)
            job_id = submit_job(stack, work, gate, per_rank, args.paced_seconds)
            store = Store(database_url, job_id)
            store.wait("every rank's ready line", lambda: store.count("payload->>'line' LIKE 'ready r%%'") >= RANKS,
                       timeout=180)
            sse = args.sse_clients if sse_route_exists(stack, job_id) else 0
            if args.sse_clients and not sse:
                print(f"SSE: {SSE_PATH} answers no stream yet; WebSocket clients only", flush=True)
            clients = Clients(stack, job_id, args.ws_clients, sse)
            clients.start()
            memory = MemoryWatch(stack)
            memory.start()
            time.sleep(2.0)  # every client connected and replayed
            memory.before = memory.sample()

            # Paced: the delay of every line at 5,000 lines/s.
            clients.record(True)
            paced_total = RANKS * int(PACED_RATE / RANKS * args.paced_seconds)
            before_paced = store.max_id()
            paced_started = time.time()
            (gate / "paced").touch()
            paced_done = store.stored_all("p", paced_total, before_paced, timeout=args.paced_seconds + 120)
            paced_rate = paced_total / (paced_done - paced_started)
            last_paced = store.max_id("type = 'log'")
            deadline = time.monotonic() + 60
            while any(c.cursor < last_paced for c in clients.all) and time.monotonic() < deadline:
                time.sleep(0.2)
            time.sleep(1.0)
            clients.record(False)
            latencies = [x for c in clients.all for x in c.latencies]
            print(f"paced: {paced_total:,} lines, {len(latencies):,} deliveries timed", flush=True)

            # Flood: the rate into PostgreSQL.
            memory.peak = {}
            samples: list[tuple[float, int]] = []
            before_flood = store.max_id()
            database = database_url.rsplit("/", 1)[1]
            cpu_before = cpu_seconds(stack, database)
            flood_started = time.time()
            (gate / "flood").touch()
            flood_expected = RANKS * per_rank

            def sample() -> bool:
                samples.append((time.time(), store.max_id()))
                if len(samples) % 10 or store.logs_after(before_flood) < flood_expected:
                    return False
                return store.lines("f") >= flood_expected  # the exact check, once the count says so

            flood_done = store.wait("the flood stored", sample, timeout=args.drain_timeout, poll=0.5)
            samples.append((time.time(), store.max_id()))
            cpu_after = cpu_seconds(stack, database)
            cpu_per_event = {name: (cpu_after[name] - cpu_before.get(name, 0.0)) / (samples[-1][1] - before_flood) * 1e6
                             for name in cpu_after}
            sustained, covered = rate_over(samples, flood_started, WINDOW_S)
            overall = flood_expected / (flood_done - flood_started)
            print(f"flood: {flood_expected:,} lines stored in {flood_done - flood_started:.1f} s", flush=True)
            # Caught up: every client has the last flood line (resource samples go on meanwhile).
            last_line = store.max_id("type = 'log'")
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline and any(c.cursor < last_line for c in clients.all):
                time.sleep(0.5)
            caught_up = time.time() - flood_done
            memory.stop.set()
            clients.close()
            # What each should have: every event of the job up to its cursor (SSE: the log lines).
            wanted = {c.name: store.count("id <= %s" + ("" if c.kind == "ws" else " AND type = 'log'"), c.cursor)
                      for c in clients.all}
            (gate / "end").touch()
            final = stack.wait_job(job_id, {"completed", "failed", "stopped"}, timeout=120)
            sound = store.soundness()
            peak = dict(memory.peak)
    finally:
        if args.keep:
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)

    # --- the table ---
    ratio = sustained / ceiling
    p50, p99 = pct(latencies, 0.50), pct(latencies, 0.99)
    seq_ok = all(n == distinct == top for _, n, distinct, top in sound["nodes"]) and len(sound["nodes"]) == NODES
    per_rank_lines = per_rank + int(PACED_RATE / RANKS * args.paced_seconds)
    lines_ok = len(sound["lines"]) == RANKS and all(n == d == per_rank_lines for _, n, d in sound["lines"])
    clients_ok = all(c.duplicates == 0 and c.gaps == 0 and c.events == wanted[c.name] and c.cursor >= last_line
                     for c in clients.all)
    lost_ok = sound["lost"] == 0 and final["status"] == "completed"
    memory_ok = bool(peak) and max(peak.values()) < RSS_CAP_MB
    drops = sum(c.closes.get(4429, 0) for c in clients.all)

    print(f"\nstream: {NODES} nodes x {PROCS} ranks printing ~{PAD + 30}-byte lines, {len(clients.ws)} WebSocket + "
          f"{len(clients.sse)} SSE clients, {os.cpu_count()} cores")
    print(f"{'measure':<46}{'value':>16}  {'target':<22}{'result'}")
    print("-" * 92)
    print(f"{'raw ceiling (XADD + COPY, same run), events/s':<46}{ceiling:>16,.0f}  {'':<22}")
    print(f"{'flood: stored in PostgreSQL, events/s':<46}{sustained:>16,.0f}  {f'>= {TARGET_RATIO:.0%} of ceiling':<22}"
          f"{verdict(ratio >= TARGET_RATIO)} ({ratio:.0%} over {covered:.0f} s)")
    print(f"{'flood: whole drain, events/s':<46}{overall:>16,.0f}")
    print(f"{'flood: last client caught up after, s':<46}{caught_up:>16.1f}  {'':<22}"
          f"{drops} resume-drops")
    print(f"{'paced: lines/s stored while paced':<46}{paced_rate:>16,.0f}  {f'>= {TARGET_PACED_STORED:,}':<22}"
          f"{verdict(paced_rate >= TARGET_PACED_STORED)}")
    print(f"{'paced 5,000/s: rank write -> client, p50 ms':<46}{p50 * 1000:>16.0f}")
    print(f"{'paced 5,000/s: rank write -> client, p99 ms':<46}{p99 * 1000:>16.0f}  {'< 250 ms':<22}"
          f"{verdict(p99 < TARGET_P99_S)}")
    print(f"{'loss: seq 1..n per node, each line once':<46}{'':>16}  {'none':<22}{verdict(seq_ok and lines_ok)}")
    print(f"{'loss: every client every event once, in order':<46}{'':>16}  {'none':<22}{verdict(clients_ok)}")
    lost_text = f"{sound['lost']} / {final['status']}"
    print(f"{'nodes declared lost / job':<46}{lost_text:>16}  {'0 / completed':<22}{verdict(lost_ok)}")
    print(f"{'peak RSS of any process while flooding, MB':<46}{max(peak.values(), default=0):>16.0f}  "
          f"{f'< {RSS_CAP_MB} MB':<22}{verdict(memory_ok)}")
    print("\npeak RSS by process (MB): before the flood -> while it floods")
    print("  " + ", ".join(f"{name} {memory.before.get(name, 0):.0f} -> {mb:.0f}" for name, mb in sorted(peak.items())))
    print("CPU per stored event while it floods (µs): " + ", ".join(
        f"{name} {us:.0f}" for name, us in sorted(cpu_per_event.items(), key=lambda item: -item[1])))
    print("clients: " + "; ".join(
        f"{c.name} {c.events:,} events {c.frames:,} frames closes {dict(c.closes) or '-'}"
        + (f" errors {dict(c.errors)}" if c.errors else "") for c in clients.all[:3] + clients.sse))
    for c in clients.all:
        if c.duplicates or c.gaps or c.events != wanted[c.name] or c.cursor < last_line:
            print(f"  {c.name}: {c.events:,} events of {wanted[c.name]:,} up to id {c.cursor} (last line {last_line}), "
                  f"{c.duplicates} repeated, {c.gaps} gaps")
    if not seq_ok or not lines_ok:
        print(f"nodes (id, events, distinct, max seq): {sound['nodes']}\nranks (rank, lines, distinct): {sound['lines']}")
    passed = ratio >= TARGET_RATIO and paced_rate >= TARGET_PACED_STORED and p99 < TARGET_P99_S and seq_ok and lines_ok and clients_ok and lost_ok and memory_ok
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

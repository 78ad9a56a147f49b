"""Benchmark `machines`: 1,000 simulated agents heartbeating every 2 s against one controller.

A real stack (`torchyard-server run`, no local agents, a PostgreSQL database and a Redis server of
its own), 1,000 machines registered through `POST /api/machines`, and a simulator process that,
for each machine, fetches its agent config with the machine's token (`GET /api/agent/config`: its
Redis URL, with a Redis user of its own where agent ACLs are on) and writes a heartbeat to the
machine's liveness stream every 2 s, phases spread evenly, exactly as the agent's `heartbeat_once`
builds it (protocol.encode_event, machine_liveness_stream, the capabilities and cache summary of
this host). Only the load differs per beat: `cpu_usage` carries the beat's number (k / 10), so
the bench can tell which beat a machine's row shows.

Measured over MEASURE_S seconds after a warm-up (every machine online):

    heartbeat lag      from the beat's `ts` to its application (the row's last_heartbeat, read
                       from PostgreSQL every 100 ms with the beat number in current_load); p50, p99
    backlog            entries waiting in the liveness streams (XLEN, sampled every second): the
                       first third of the run against the last
    CPU                the controller's, the ingest loop's, the web process's and beat's CPU time
                       over the run, as a share of one core (psutil)
    GET /api/machines  N calls with 1,000 machines, back to back with a pause, while beats go on
    cluster stream     a WebSocket client on /api/cluster/stream: messages/s and bytes/s

Targets (issue 9): no backlog growth (the last third's backlog at most half a second of beats above
the first's), p99 lag under 1 s, the list under 200 ms (p99), the cluster
stream at most 2 messages/s on average and 4 in any second. A missed target prints MISSED; the bench
fails only when it could not measure.

    make bench BENCH=machines
    python tests/benchmarks/bench_machines.py --machines 200 --measure 30   # a smaller run
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import psutil  # noqa: E402
import psycopg  # noqa: E402
import redis  # noqa: E402
import requests  # noqa: E402
from integration.databases import database  # noqa: E402
from integration.stack import Stack, start_stack, unique_name  # noqa: E402
from torchyard import protocol  # noqa: E402
from websockets.sync.client import connect as ws_connect  # noqa: E402

BEAT_EVERY = 2.0  # the agent's HEARTBEAT_EVERY
TARGET_LAG_P99_S = 1.0
TARGET_LIST_P99_S = 0.2
TARGET_STREAM_AVG = 2.0
TARGET_STREAM_PEAK = 4
# The backlog may wobble by up to half a second of beats between the run's first and last third; an
# ingest that cannot keep up grows it by that much every few seconds.
BACKLOG_SLACK_S = 0.5
POLL_S = 0.1


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machines", type=int, default=1000)
    parser.add_argument("--warmup", type=float, default=15.0, help="seconds of beats before measuring")
    parser.add_argument("--measure", type=float, default=60.0, help="seconds measured")
    parser.add_argument("--list-calls", type=int, default=100, help="GET /api/machines calls")
    return parser.parse_args(argv)


# --- the stack -----------------------------------------------------------------------------------
@contextlib.contextmanager
def machines_stack(work: Path) -> Iterator[tuple[Stack, str, str]]:
    """A stack without local agents, on a database and a Redis of its own; (stack, database URL,
    Redis URL). The shared test Redis database is emptied by integration tests that start."""
    from torchyard_server.runtime.embedded_redis import start_redis

    with database(unique_name("torchyard_bench")) as database_url:
        server = start_redis(work / "redis")
        stack = None
        try:
            (work / "stack").mkdir(parents=True, exist_ok=True)
            stack = start_stack(work / "stack", env={"DATABASE_URL": database_url, "REDIS_URL": server.url}, agents=0)
            yield stack, database_url, server.url
        finally:
            if stack is not None:
                stack.stop()
            server.stop()


def register(stack: Stack, count: int) -> list[dict[str, Any]]:
    """Register `count` machines through the API, then ask for each one's agent config with its
    token, as `torchyard agent --server URL --token T` does; [{id, token, redis_url}]."""
    def one(index: int) -> dict[str, Any]:
        created = stack.api("POST", "/api/machines", json={"name": f"sim-{index:04d}", "host": f"10.{index // 250}.{index % 250}.1"})
        assert created.status_code == 201, created.text
        token = created.json()["token"]
        config = requests.get(stack.base + "/api/agent/config", headers={"Authorization": f"Machine {token}"}, timeout=30)
        assert config.status_code == 200, config.text
        return {"id": created.json()["id"], "token": token, "redis_url": config.json()["redis_url"]}

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(count)))


# --- the simulator (a process of its own) --------------------------------------------------------
def heartbeat_template(work_dir: Path) -> dict[str, Any]:
    """What the agent's heartbeat_once sends, minus machine, token, load and ts: this host's
    capabilities and cache summary, taken once (1,000 probes every 2 s would measure the simulator)."""
    import torchyard
    from torchyard.agent import capabilities, warm

    (work_dir / "cache").mkdir(parents=True, exist_ok=True)
    training = {"python_version": platform.python_version(), "torch_version": importlib.metadata.version("torch")}
    return {
        "type": protocol.MACHINE_HEARTBEAT,
        "hostname": platform.node(),
        "agent_version": torchyard.__version__,
        "capabilities": capabilities.capabilities(str(work_dir)) | training,
        "cache": warm.cache_summary(work_dir / "cache"),
        "running": [],
    }


async def _simulate(machines: list[dict[str, Any]], template: dict[str, Any], sent: list[tuple[int, int, float]],
                    stop_path: Path) -> None:
    import redis.asyncio as aioredis
    from torchyard.agent import capabilities

    # One connection per Redis URL: per machine where each has a Redis user of its own.
    clients = {url: aioredis.Redis.from_url(url, socket_timeout=10) for url in {m["redis_url"] for m in machines}}
    start = time.time() + 0.5
    phase = BEAT_EVERY / len(machines)
    beats = [0] * len(machines)
    load = capabilities.load()
    last_load = time.monotonic()

    def beat(index: int, pipe: Any) -> None:
        machine = machines[index]
        k = beats[index]
        beats[index] += 1
        now = time.time()
        event = {**template, "machine": machine["id"], "token": machine["token"],
                 "load": {**load, "cpu_usage": (k % 1000) / 10}, "ts": now}
        pipe.xadd(protocol.machine_liveness_stream(machine["id"]), protocol.encode_event(event),
                  maxlen=protocol.LIVENESS_STREAM_MAXLEN, approximate=True)
        sent.append((machine["id"], k, now))

    async def send(url: str, due: list[int]) -> None:
        pipe = clients[url].pipeline(transaction=False)
        for index in due:
            beat(index, pipe)
        await pipe.execute()

    cursor = 0  # beats are due in order: machine i's k-th at start + i * phase + k * BEAT_EVERY
    while True:
        now = time.time()
        due: dict[str, list[int]] = {}
        while start + cursor * phase <= now:
            index = cursor % len(machines)
            due.setdefault(machines[index]["redis_url"], []).append(index)
            cursor += 1
        if due:  # what falls due together goes together, per connection: an agent's XADD each
            await asyncio.gather(*(send(url, indexes) for url, indexes in due.items()))
        if time.monotonic() - last_load > 1.0:  # as often as an agent would take it, at most
            load, last_load = capabilities.load(), time.monotonic()
            if stop_path.exists():
                break
        await asyncio.sleep(max(0.0, min(0.005, start + cursor * phase - time.time())))
    for client in clients.values():
        await client.aclose()


def simulate_main(config_path: str, out_path: str) -> int:
    """Beat until the file `<out_path>.stop` appears, then write every beat sent to out_path."""
    config = json.loads(Path(config_path).read_text())
    template = heartbeat_template(Path(config["work_dir"]))
    sent: list[tuple[int, int, float]] = []
    asyncio.run(_simulate(config["machines"], template, sent, Path(out_path + ".stop")))
    Path(out_path).write_text(json.dumps(sent))
    return 0


# --- measuring -----------------------------------------------------------------------------------
class RowWatcher(threading.Thread):
    """Reads every machine's last_heartbeat and beat number every POLL_S: (id, k) -> applied at."""

    def __init__(self, database_url: str) -> None:
        super().__init__(daemon=True)
        self.database_url, self.applied, self.stop = database_url, {}, threading.Event()

    def run(self) -> None:
        with psycopg.connect(self.database_url, autocommit=True) as conn:
            while not self.stop.is_set():
                rows = conn.execute("SELECT id, last_heartbeat, current_load->>'cpu_usage' FROM machines_machine "
                                    "WHERE last_heartbeat IS NOT NULL").fetchall()
                for machine_id, applied_at, code in rows:
                    if code is not None:
                        self.applied.setdefault((machine_id, round(float(code) * 10)), applied_at.timestamp())
                self.stop.wait(POLL_S)


class BacklogWatcher(threading.Thread):
    """Entries waiting in the machines' liveness streams, every second: [(t, entries)]."""

    def __init__(self, redis_url: str, machine_ids: list[int]) -> None:
        super().__init__(daemon=True)
        self.client = redis.Redis.from_url(redis_url)
        self.streams = [protocol.machine_liveness_stream(m) for m in machine_ids]
        self.samples: list[tuple[float, int]] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(1.0):
            pipe = self.client.pipeline(transaction=False)
            for stream in self.streams:
                pipe.xlen(stream)
            self.samples.append((time.time(), sum(pipe.execute())))


class ClusterStreamClient(threading.Thread):
    """A dashboard's WebSocket on /api/cluster/stream: every message's arrival, type and size."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(daemon=True)
        self.stack, self.messages, self.stop, self.error = stack, [], threading.Event(), None

    def run(self) -> None:
        try:
            with ws_connect(self.stack.ws_url("/api/cluster/stream"), max_size=None, open_timeout=30,
                            additional_headers={"Authorization": f"Token {self.stack.token}"}) as ws:
                while not self.stop.is_set():
                    with contextlib.suppress(TimeoutError):
                        raw = ws.recv(timeout=0.5)
                        self.messages.append((time.time(), json.loads(raw).get("type"), len(raw)))
        except Exception as exc:  # reported in the table, not swallowed
            self.error = exc


def list_latencies(stack: Stack, calls: int, spread_s: float) -> list[float]:
    took = []
    pause = max(spread_s / calls, 0.05)
    for _ in range(calls):
        started = time.perf_counter()
        response = stack.api("GET", "/api/machines")
        took.append(time.perf_counter() - started)
        assert response.status_code == 200 and len(response.json()) >= 1, response.text[:500]
        time.sleep(pause)
    return took


def cpu_seconds(proc: psutil.Process) -> float:
    times = proc.cpu_times()
    return times.user + times.system + times.children_user + times.children_system


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered) + 0.5) - 1))]


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISSED"


# --- the run -------------------------------------------------------------------------------------
def main(argv: list[str]) -> int:
    if argv[:1] == ["simulate"]:
        return simulate_main(argv[1], argv[2])
    args = parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench-machines-"))
    with machines_stack(work) as (stack, database_url, redis_url):
        started = time.monotonic()
        machines = register(stack, args.machines)
        print(f"registered {len(machines)} machines in {time.monotonic() - started:.1f} s", flush=True)
        started = time.monotonic()
        config = work / "simulator.json"
        config.write_text(json.dumps({"machines": machines, "work_dir": str(work / "sim")}))
        sent_path = work / "sent.json"
        simulator = subprocess.Popen([sys.executable, __file__, "simulate", str(config), str(sent_path)])
        try:
            rows = RowWatcher(database_url)
            rows.start()
            deadline = time.monotonic() + args.warmup + 60
            while True:  # every machine online before measuring
                online = sum(1 for m in stack.api("GET", "/api/machines").json() if m["status"] == "online")
                if online >= len(machines):
                    break
                assert time.monotonic() < deadline and simulator.poll() is None, \
                    f"{online} of {len(machines)} machines online\n{stack.log_tail()}"
                time.sleep(1.0)
            time.sleep(max(0.0, args.warmup - (time.monotonic() - started)))
            print(f"all {len(machines)} machines online; measuring {args.measure:.0f} s", flush=True)

            procs = {name: stack.child(name) for name in ("controller", "ingest", "web", "beat")}
            cpu_before = {name: cpu_seconds(p) for name, p in procs.items()}
            backlog = BacklogWatcher(redis_url, [m["id"] for m in machines])
            stream = ClusterStreamClient(stack)
            load_before = os.getloadavg()[0]
            window_start = time.time()
            wall_start = time.monotonic()
            backlog.start()
            stream.start()
            latencies = list_latencies(stack, args.list_calls, args.measure * 0.8)
            time.sleep(max(0.0, args.measure - (time.monotonic() - wall_start)))
            wall = time.monotonic() - wall_start
            cpu = {name: (cpu_seconds(p) - cpu_before[name]) / wall for name, p in procs.items()}
            window_end = time.time()
            load_after = os.getloadavg()[0]
            for watcher in (backlog, stream):
                watcher.stop.set()
            Path(str(sent_path) + ".stop").touch()
            simulator.wait(timeout=60)
            time.sleep(1.0)  # the last beats' rows
            rows.stop.set()
            rows.join(timeout=10)
            stream.join(timeout=10)
            backlog.join(timeout=10)
        finally:
            if simulator.poll() is None:
                simulator.kill()
                simulator.wait()
        assert simulator.returncode == 0, f"the simulator exited with {simulator.returncode}"
        sent = json.loads(sent_path.read_text())

    # Beats sent in the window; each seen applied, or overwritten by the machine's next one first.
    lags, unseen = [], 0
    for machine_id, k, ts in sent:
        if window_start <= ts <= window_end:
            applied = rows.applied.get((machine_id, k))
            if applied is None:
                unseen += 1
            else:
                lags.append(applied - ts)
    in_window = [m for m in stream.messages if window_start <= m[0] <= window_end]
    per_second: dict[int, int] = {}
    for t, _, _ in in_window:
        per_second[int(t)] = per_second.get(int(t), 0) + 1
    span = window_end - window_start
    third = max(1, len(backlog.samples) // 3)
    first_backlog = statistics.mean(n for _, n in backlog.samples[:third])
    last_backlog = statistics.mean(n for _, n in backlog.samples[-third:])
    beats_per_s = len(machines) / BEAT_EVERY

    print(f"\nmachines: {len(machines)} simulated agents, a heartbeat each every {BEAT_EVERY:.0f} s "
          f"({beats_per_s:.0f}/s), {span:.0f} s measured, {os.cpu_count()} cores, load average "
          f"{load_before:.1f} -> {load_after:.1f} (everything else on the machine counts too)")
    print(f"{'measure':<44}{'value':>12}   {'target':<14}result")
    print("-" * 80)
    p50, p99 = percentile(lags, 50), percentile(lags, 99)
    print(f"{'heartbeat lag p50 (s)':<44}{p50:>12.3f}")
    print(f"{'heartbeat lag p99 (s)':<44}{p99:>12.3f}   {'< 1.0':<14}{verdict(p99 < TARGET_LAG_P99_S)}")
    print(f"{'heartbeat lag max (s)':<44}{max(lags):>12.3f}")
    print(f"{'beats applied / sent in the window':<44}{f'{len(lags)}/{len(lags) + unseen}':>12}")
    slack = BACKLOG_SLACK_S * beats_per_s
    grew = last_backlog - first_backlog
    print(f"{'backlog, first third -> last third (entries)':<44}{f'{first_backlog:.0f} -> {last_backlog:.0f}':>12}   "
          f"{f'growth <= {slack:.0f}':<14}{verdict(grew <= slack)}")
    print(f"{'backlog max (entries)':<44}{max(n for _, n in backlog.samples):>12}")
    for name, share in cpu.items():
        print(f"{f'CPU {name} (% of one core)':<44}{share * 100:>12.1f}")
    print(f"{'CPU all four (% of the machine)':<44}{sum(cpu.values()) * 100 / (os.cpu_count() or 1):>12.1f}")
    l50, l99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"{f'GET /api/machines p50 (ms, {len(latencies)} calls)':<44}{l50 * 1000:>12.1f}")
    print(f"{f'GET /api/machines p99 (ms, {len(latencies)} calls)':<44}{l99 * 1000:>12.1f}   {'< 200':<14}"
          f"{verdict(l99 < TARGET_LIST_P99_S)}")
    if stream.error is not None:
        print(f"cluster stream: the client failed: {stream.error!r}")
    rate = len(in_window) / span
    peak = max(per_second.values(), default=0)
    kinds = sorted({t for _, t, _ in in_window})
    print(f"{'cluster stream messages/s (' + ','.join(kinds) + ')':<44}{rate:>12.2f}   "
          f"{f'<= {TARGET_STREAM_AVG:.0f}':<14}{verdict(rate <= TARGET_STREAM_AVG)}")
    print(f"{'cluster stream messages in its busiest second':<44}{peak:>12}   {f'<= {TARGET_STREAM_PEAK}':<14}"
          f"{verdict(peak <= TARGET_STREAM_PEAK)}")
    print(f"{'cluster stream kB/s':<44}{sum(n for _, _, n in in_window) / span / 1000:>12.1f}")
    return 0 if lags and latencies and stream.error is None else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The same work as the Rust coordinator's demo, done by hand, as the baseline `bench_seed001` sets
Torchyard's figures beside: what this machine gives a plain loop, nothing of Torchyard in it.

Four worker processes, each reading its round-robin share of the same line shards, one line a step,
apart from the others (no process group), and every CHECKPOINT_EVERY steps writing its position
the way the coordinator's worker does: a JSON file written to a temporary name, fsynced, renamed
over the last one, the directory fsynced. A parent process (the coordinator) starts them, and when
one dies, waits 500 ms (its first backoff) and starts it again; the new one reads its last
checkpoint and goes on at the next line.

    worker       python plain_coordinator.py worker RANK WORLD SHARDS_DIR CKPT_DIR EVERY STEPS_FILE
    measure      run_round(...) and restart_round(...) from bench_seed001

Each worker appends "<step> <unix time>" to STEPS_FILE at its first step and at its end, and the
seconds of each checkpoint write, so the parent reads its figures after the fact.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

BACKOFF_S = 0.5  # the coordinator's first wait before a restart


def _write_atomically(path: Path, state: dict) -> None:
    partial = path.with_suffix(".tmp")
    with open(partial, "w") as handle:
        json.dump(state, handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(partial, path)
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def worker(rank: int, world: int, shards_dir: Path, ckpt_dir: Path, every: int, log: Path) -> int:
    shards = sorted(p for p in shards_dir.iterdir() if p.is_file())[rank::world]
    latest = ckpt_dir / f"rank-{rank}.json"
    state = json.loads(latest.read_text()) if latest.exists() else {"step": 0, "shard_idx": 0, "line_idx": 0}
    step, writes = state["step"], []
    with open(log, "a") as out:
        out.write(f"start {step} {time.time()}\n")
        out.flush()
        first = True
        for shard_idx in range(state["shard_idx"], len(shards)):
            with open(shards[shard_idx]) as handle:
                lines = handle.readlines()
            start = state["line_idx"] if shard_idx == state["shard_idx"] else 0
            for line_idx in range(start, len(lines)):
                _ = lines[line_idx].split()  # the step's work: one line
                step += 1
                if first:
                    out.write(f"first {step} {time.time()}\n")
                    out.flush()
                    first = False
                if step % every == 0:
                    began = time.perf_counter()
                    _write_atomically(latest, {"step": step, "shard_idx": shard_idx, "line_idx": line_idx + 1})
                    writes.append(time.perf_counter() - began)
        out.write(f"end {step} {time.time()}\n")
        out.write("writes " + " ".join(f"{w:.6f}" for w in writes) + "\n")
    return 0


def _spawn(rank: int, world: int, shards_dir: Path, ckpt_dir: Path, every: int, log: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "worker", str(rank), str(world), str(shards_dir),
                             str(ckpt_dir), str(every), str(log)])


def _entries(log: Path, kind: str) -> list[list[str]]:
    return [line.split()[1:] for line in log.read_text().splitlines() if line.startswith(kind + " ")]


def _start(work: Path, shards_dir: Path, world: int, every: int) -> tuple[Path, list[Path], list[subprocess.Popen]]:
    """Every worker of a new run: (its checkpoint folder, each worker's log, each worker)."""
    ckpt = work / f"plain-{time.monotonic_ns()}"
    ckpt.mkdir(parents=True)
    logs = [ckpt / f"rank-{r}.log" for r in range(world)]
    return ckpt, logs, [_spawn(r, world, shards_dir, ckpt, every, logs[r]) for r in range(world)]


def run_round(work: Path, shards_dir: Path, world: int, every: int) -> tuple[float, list[float]]:
    """(steps a second of the slowest worker, from its first step to its last; every checkpoint
    write's seconds) of one run to its end."""
    _, logs, procs = _start(work, shards_dir, world, every)
    assert all(p.wait(timeout=600) == 0 for p in procs)
    rates, writes = [], []
    for log in logs:
        (first_step, first_ts), = _entries(log, "first")
        (last_step, last_ts), = _entries(log, "end")
        rates.append((int(last_step) - int(first_step)) / (float(last_ts) - float(first_ts)))
        writes.extend(float(w) for entry in _entries(log, "writes") for w in entry)
    return min(rates), writes


def restart_round(work: Path, shards_dir: Path, world: int, every: int) -> float:
    """kill -9 of the last worker -> its replacement's first step (after the 500 ms backoff), in seconds."""
    ckpt, logs, procs = _start(work, shards_dir, world, every)
    victim = world - 1
    try:
        deadline = time.monotonic() + 60
        while not (ckpt / f"rank-{victim}.json").exists():
            assert time.monotonic() < deadline and procs[victim].poll() is None, "the plain worker never checkpointed"
            time.sleep(0.01)
        killed = time.time()
        procs[victim].send_signal(signal.SIGKILL)
        # The coordinator's loop: notice the exit, wait out the backoff, start it again.
        procs[victim].wait()
        time.sleep(BACKOFF_S)
        procs[victim] = _spawn(victim, world, shards_dir, ckpt, every, logs[victim])
        while len(_entries(logs[victim], "first")) < 2:
            assert time.monotonic() < deadline and procs[victim].poll() in (None, 0), "the restarted worker never stepped"
            time.sleep(0.005)
        return float(_entries(logs[victim], "first")[-1][1]) - killed
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()


if __name__ == "__main__" and sys.argv[1:2] == ["worker"]:
    rank_, world_, shards_, ckpt_, every_, log_ = sys.argv[2:8]
    sys.exit(worker(int(rank_), int(world_), Path(shards_), Path(ckpt_), int(every_), Path(log_)))

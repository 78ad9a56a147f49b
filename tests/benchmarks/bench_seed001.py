"""Benchmark `seed001`: the Rust coordinator's "Performance Baseline" table (throughput with 4
workers, checkpoint write time, restart time), measured for Torchyard on this machine beside a plain
loop of the same work (plain_coordinator.py: four processes, JSON checkpoints written atomically, a
parent that restarts a dead one after 500 ms, nothing of Torchyard), and printed next to the
coordinator's own figures, quoted from its README.

Targets: the coordinator's Local column, 100 steps/sec, ~10 ms a checkpoint, ~0.5 s to restart. A
missed target prints MISSED (the bench fails only when it could not measure).

The workload is the seed's own, as Torchyard runs it: examples/seed001_worker.py (its demo worker:
each rank reads its round-robin share of line shards, one line per step, and checkpoints its exact
position), 4 workers (2 nodes x 2 processes, CPU, gloo), CHECKPOINT_EVERY=5 and SLEEP_SEC=0, on
synthetic shards made by the worker itself (`--make-dataset`, 8 shards), on a real stack
(`torchyard-server run`, two local agents, PostgreSQL, the launcher's own Redis). The ranks step
apart, as the coordinator's workers do, and meet to commit each checkpoint.

    throughput   job steps per second (one line on every rank per step), from rank 0's own
                 metric timestamps between its first and last report; with CHECKPOINT_EVERY=5 (the
                 coordinator's setting: without checkpoints a step is a line read, too quick to time)
    checkpoint   the write of one checkpoint: the save call to its commit (rank 0's file written,
                 fsynced, hashed; every rank's result gathered; the manifest written and the step
                 directory moved into place), as
                 rank 0 timed it (the manifest's save.blocking_seconds), every checkpoint of the
                 CHECKPOINT_EVERY=5 runs
    restart      kill -9 of rank 3 (a training process, from outside) -> the job `recovering`
                 (detect) -> every node of the next attempt running (restart) -> the last of the
                 four ranks' first step of that attempt (back to training), resumed from the last
                 committed checkpoint

Median of ROUNDS each. The coordinator's Docker and K8s columns are quoted as they are: this machine runs
neither, and Torchyard's production path (docker-compose.yml) adds no hop the local one lacks.

    make bench BENCH=seed001
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import launch_common as lc  # noqa: E402
import plain_coordinator as plain  # noqa: E402

WORKER = "examples/seed001_worker.py"
WORKER_PATH = lc.ROOT / "workers" / "torchyard" / WORKER
ROUNDS = 3
SHARDS = 8
THROUGHPUT_LINES = 600  # per shard: 2 shards a rank at 4 workers, 1,200 steps a run
RESTART_LINES = 5000  # long enough never to end before it is stopped
KILL_RANK = lc.WORLD - 1
FINAL = {"completed", "failed", "stopped"}

# The seed's README, "Performance Baseline", as printed there.
SEED_TABLE = [
    ("Throughput", "100 steps/sec", "80 steps/sec", "60-80 steps/sec"),
    ("Checkpoint", "~10ms", "~50ms", "~100-500ms"),
    ("Restart", "~0.5s", "~2s", "~3-5s"),
]
SEED_NOTE = "With 4 workers + CHECKPOINT_EVERY=5: completes ~20-25 checkpoint cycles per second"
# The Local column as targets: steps/s at least, checkpoint and restart seconds at most.
TARGETS = {"throughput": 100.0, "checkpoint": 0.010, "restart": 0.5}


def make_dataset(work: Path, lines: int) -> Path:
    """The worker's own synthetic shards (the seed's make_dataset.py), on the disk every local node reads."""
    target = work / f"shards-{lines}"
    subprocess.run([sys.executable, str(WORKER_PATH), "--make-dataset", str(target), "--shards", str(SHARDS),
                    "--lines", str(lines)], check=True, capture_output=True, timeout=120)
    return target


def spec(name: str, dataset: Path, checkpoint_every: int, **extra: Any) -> dict[str, Any]:
    return {
        "name": name, "entrypoint": WORKER, "args": ["--log-every", "20"],
        "resources": {"nodes": lc.NODES, "procs_per_node": lc.PROCS},
        "env": {"DATASET_DIR": str(dataset), "CHECKPOINT_EVERY": str(checkpoint_every), "SLEEP_SEC": "0"},
        "checkpointing": {"enabled": checkpoint_every > 0, "every_n_steps": max(checkpoint_every, 1), "keep": 2},
        **extra,
    }


def throughput_round(stack, dataset: Path, name: str, checkpoint_every: int) -> tuple[float, list[float]]:
    """(job steps per second, each checkpoint's write time in seconds) of one run to its end."""
    job = stack.submit(spec(name, dataset, checkpoint_every, fault_tolerance={"max_restarts": 0}))
    done = stack.wait_job(job["id"], FINAL, timeout=600)
    assert done["status"] == "completed", f"{done['status_reason']}\n{stack.job_log_tail(job['id'])}"
    reader = lc.EventReader(stack, job["id"])
    reader.poll()
    lc.end_job(stack, job["id"])
    reports = sorted((e["step"], lc.ts(e)) for e in reader.events
                     if e["type"] == "metric" and e.get("rank") == 0 and e["attempt"] == 0 and e.get("step"))
    (first_step, first_ts), (last_step, last_ts) = reports[0], reports[-1]
    writes = [e["manifest"]["save"]["blocking_seconds"] for e in reader.events if e["type"] == "checkpoint"]
    return (last_step - first_step) / (last_ts - first_ts), writes


def restart_round(stack, dataset: Path, round_no: int) -> dict[str, float]:
    job = stack.submit(spec(f"bench-seed001-restart-{round_no}", dataset, 5,
                            fault_tolerance={"max_restarts": 1, "heartbeat_timeout": 10}))
    reader, _ = lc.first_metrics(stack, job["id"], 0)
    deadline = time.monotonic() + 60
    while not any(e["type"] == "checkpoint" for e in reader.events):
        reader.poll()
        assert time.monotonic() < deadline, f"no checkpoint:\n{stack.job_log_tail(job['id'])}"
        time.sleep(0.2)
    time.sleep(0.5)  # steady training, not right at a commit
    killed = lc.kill_rank(stack, job["id"], 0, KILL_RANK)
    reader, first = lc.first_metrics(stack, job["id"], 1, reader=reader)
    lc.end_job(stack, job["id"])
    reader.poll()
    states = reader.job_states()

    def first_state(status: str, attempt: int) -> float:
        return min(lc.ts(e) for e in states if e["status"] == status and e["attempt"] == attempt and lc.ts(e) >= killed)

    recovering, running = first_state("recovering", 0), first_state("running", 1)
    return {"detect": recovering - killed, "restart": running - recovering, "first step": max(first.values()) - running,
            "running": running - killed, "total": max(first.values()) - killed}


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-seed001-"))
    try:
        short, long = make_dataset(work, THROUGHPUT_LINES), make_dataset(work, RESTART_LINES)
        with lc.bench_stack(work) as stack:
            stack.wait_warm()
            throughput_round(stack, short, "bench-seed001-warmup", 5)  # not counted
            with_ckpt, writes, restarts = [], [], []
            for round_no in range(ROUNDS):
                rate, saved = throughput_round(stack, short, f"bench-seed001-{round_no}", 5)
                with_ckpt.append(rate)
                writes.extend(saved)
                restarts.append(restart_round(stack, long, round_no))
                r = restarts[-1]
                print(f"round {round_no + 1}/{ROUNDS}: {with_ckpt[-1]:.0f} steps/s (checkpoint every 5), "
                      f"restart: kill -> recovering {r['detect']:.2f} s, "
                      f"-> running {r['restart']:.2f} s, -> first step {r['first step']:.2f} s", flush=True)
        plain_rates, plain_writes, plain_restarts = [], [], []
        for _ in range(ROUNDS):  # the same work by hand, on the same machine, after Torchyard's rounds
            rate, saved = plain.run_round(work, short, lc.WORLD, 5)
            plain_rates.append(rate)
            plain_writes.extend(saved)
            plain_restarts.append(plain.restart_round(work, long, lc.WORLD, 5))
        restart = {key: lc.med([r[key] for r in restarts]) for key in restarts[0]}
        figures = {"throughput": lc.med(with_ckpt), "checkpoint": lc.med(writes), "restart": restart["total"]}
        missed = [name for name, value in figures.items()
                  if (value < TARGETS[name] if name == "throughput" else value > TARGETS[name])]
        ours = [
            f"{figures['throughput']:.0f} steps/sec",
            f"{ms(figures['checkpoint'])} (min {ms(min(writes))}, max {ms(max(writes))}, {len(writes)} checkpoints)",
            f"{restart['total']:.2f}s to the first step (detect {restart['detect']:.2f}s, "
            f"restart {restart['restart']:.2f}s, running at {restart['running']:.2f}s)",
        ]
        by_hand = [f"{lc.med(plain_rates):.0f} steps/sec", f"{ms(lc.med(plain_writes))} (own file, fsync, rename)",
                   f"{lc.med(plain_restarts):.2f}s (500 ms backoff included)"]
        print(f"\nthe Rust coordinator's baseline, reproduced: {WORKER}, 4 workers ({lc.NODES} nodes x {lc.PROCS} "
              f"processes, CPU, gloo), CHECKPOINT_EVERY=5, SLEEP_SEC=0, {SHARDS} shards of {THROUGHPUT_LINES} lines; "
              f"{os.cpu_count()} cores; median of {ROUNDS}")
        header = ("Metric", "Torchyard, this machine (local)", "plain loop, same machine", "coordinator: Local",
                  "Docker", "K8s", "target")
        verdicts = [("MISSED" if key in missed else "met") for key in ("throughput", "checkpoint", "restart")]
        rows = [header, *((name, ours[i], by_hand[i], local, docker, k8s, verdicts[i])
                          for i, (name, local, docker, k8s) in enumerate(SEED_TABLE))]
        widths = [max(len(row[c]) for row in rows) for c in range(len(header))]
        for index, row in enumerate(rows):
            print("| " + " | ".join(cell.ljust(widths[c]) for c, cell in enumerate(row)) + " |")
            if index == 0:
                print("|" + "|".join("-" * (w + 2) for w in widths) + "|")
        cycles = lc.med(with_ckpt) / 5
        print(f"\ncoordinator: \"{SEED_NOTE}\"; Torchyard here: {cycles:.0f} checkpoint cycles per second "
              f"(every one committed by all 4 ranks)")
        if missed:
            print(f"MISSED: {', '.join(missed)} (targets: the coordinator's Local column)")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

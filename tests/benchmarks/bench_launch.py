"""Benchmark `launch`: submit -> first metric on every rank of a 2 nodes x 2 processes job of
examples/mlp_ddp.py on CPU, through a real stack, against the same script started by hand.

Torchyard warm (ranks forked from each agent's warm pool, the default) and cold (distributed.warm
false: torchrun), each: `POST /api/jobs` on `torchyard-server run` with two local agents (PostgreSQL, the
launcher's own Redis); the time from the POST to the last of the four ranks' first metric event
(the rank's own timestamp, taken when `sdk.report()` is called at step 10). Split by the job's
state events: submit -> `dispatching` -> `running` (every node's torchrun started) -> first metric.
By hand, in the same run: two torchrun commands with the argv and environment the supervisor
would give (static master address and port on 127.0.0.1), without the event socket, so each rank
prints its `[torchyard] step=10 ...` line; the time from the first command to the last rank's line
(tests/benchmarks/launch_common.py). Median of 5 each, sides alternating, after one warm-up of each.

    make bench BENCH=launch
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import launch_common as lc  # noqa: E402

ROUNDS = 5
ARGS = ["--steps", "100"]  # first metric at step 10; the run ends by itself right after


def torchyard_launch(stack, round_no: int, warm: bool = True) -> dict[str, float]:
    """Submit, wait for every rank's first metric and the job's end; the phases from its events."""
    submitted = time.time()
    job = stack.submit(lc.job_spec(f"bench-launch-{round_no}", ARGS, fault_tolerance={"max_restarts": 0},
                                   distributed={"warm": warm}))
    reader, first = lc.first_metrics(stack, job["id"], 0)
    done = stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=120)
    assert done["status"] == "completed", done["status_reason"]
    lc.end_job(stack, job["id"])
    reader.poll()
    states = {e["status"]: lc.ts(e) for e in reversed(reader.job_states())}  # the first of each
    metric = max(first.values())
    return {
        "total": metric - submitted,
        "submit -> dispatching": states["dispatching"] - submitted,
        "dispatching -> nodes running": states["running"] - states["dispatching"],
        "nodes running -> first metric": metric - states["running"],
    }


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    try:
        with lc.bench_stack(work) as stack:
            # Warm-up, not counted: the first torch import after a while reads it from disk.
            stack.wait_warm()
            lc.hand_launch(work, ARGS)
            torchyard_launch(stack, -1)
            torchyard_launch(stack, -1, warm=False)
            hand, ours, cold = [], [], []
            for round_no in range(ROUNDS):
                sides = ("hand", "warm", "cold") if round_no % 2 == 0 else ("cold", "warm", "hand")
                for side in sides:
                    if side == "hand":
                        hand.append(lc.hand_launch(work, ARGS))
                    elif side == "warm":
                        ours.append(torchyard_launch(stack, round_no))
                    else:
                        cold.append(torchyard_launch(stack, round_no, warm=False))
                print(f"round {round_no + 1}/{ROUNDS}: by hand {hand[-1]:.2f} s, torchyard warm {ours[-1]['total']:.2f} s, "
                      f"cold {cold[-1]['total']:.2f} s", flush=True)
        base = lc.med(hand)
        totals = [o["total"] for o in ours]
        print(f"\nlaunch: submit -> first metric on all {lc.WORLD} ranks, {lc.NODES} nodes x {lc.PROCS} processes "
              f"of {lc.SCRIPT} (CPU, gloo), {ROUNDS} rounds alternating, {os.cpu_count()} cores; seconds")
        print(lc.summary_header())
        print(lc.summary_row("by hand: 2 x torchrun", hand, base))
        print(lc.summary_row("torchyard warm: submit -> metric", totals, base))
        print(lc.summary_row("torchyard cold: submit -> metric", [c["total"] for c in cold], base))
        print(lc.summary_row("warm - by hand (same round)", [o - h for o, h in zip(totals, hand, strict=True)]))
        print("\ntorchyard warm phases (job state events)")
        print(lc.summary_header("phase", ratio=False))
        for key in ("submit -> dispatching", "dispatching -> nodes running", "nodes running -> first metric"):
            print(lc.summary_row(key, [o[key] for o in ours]))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `exits`: a plain DDP script ends, run after run, warm and cold.

tests/integration/job_exits/plain_ddp.py is a training script as people write them (no Torchyard
SDK: DDP over gloo, 40 steps, `dist.destroy_process_group()` at the end, the model dropped as main()
returns), run RUNS times in a row as a 2 nodes x 2 processes job through `torchyard run` on a real
stack (`torchyard-server run`, two local agents, PostgreSQL): warm (the default), then cold (an
import-time TORCH_ variable set with --env, so torchrun starts the ranks, as a user's would). Before
torchyard/rank_main.py, 4 of 15 warm runs never ended (their ranks deadlocked in torch's teardown)
and cold ranks aborted at exit.

Target (issue 29): every job completes, none is ended by the lingering-rank watchdog (the ranks end
by themselves), in its normal time: no run over 3x its side's median. A job still running after
RUN_TIMEOUT_S counts as hung and is stopped. The bench fails when a target is missed.

    make bench BENCH=exits                      # 100 runs a side
    make bench BENCH=exits -- --runs 20         # fewer
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import launch_common as lc  # noqa: E402

RUNS = 100
RUN_TIMEOUT_S = 180.0
SCRIPT = lc.ROOT / "tests" / "integration" / "job_exits" / "plain_ddp.py"
CLI = Path(sys.executable).with_name("torchyard")
SIDES = {"warm": [], "cold": ["--env", "TORCH_CPP_LOG_LEVEL=ERROR"]}
SLOW_FACTOR = 3.0


def run_once(stack: lc.Stack, project: Path, extra: list[str]) -> tuple[str, float, int | None]:
    """One `torchyard run`: (outcome, seconds, job id); outcome completed, failed, lingered or hung."""
    env = dict(os.environ, TORCHYARD_SERVER=stack.base, TORCHYARD_TOKEN=stack.token)
    started = time.monotonic()
    try:
        done = subprocess.run([str(CLI), "run", "--nnodes", str(lc.NODES), "--nproc-per-node", str(lc.PROCS),
                               "--max-restarts", "0", *extra, "plain_ddp.py"], cwd=project, env=env,
                              capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
        outcome = "completed" if done.returncode == 0 and "== job completed" in done.stdout else "failed"
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        outcome, output = "hung", str(exc.stdout or "")
    seconds = time.monotonic() - started
    jobs = stack.api("GET", "/api/jobs").json()
    job_id = int(jobs[0]["id"]) if jobs else None
    if job_id is not None:
        if outcome == "hung":
            lc.end_job(stack, job_id)
        elif outcome == "completed" and "was still alive" in stack.job(job_id)["status_reason"]:
            outcome = "lingered"
    if outcome != "completed":
        print(f"  job {job_id}: {outcome}\n{output[-2000:]}", flush=True)
    return outcome, seconds, job_id


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    runs = parser.parse_args().runs
    work = Path(tempfile.mkdtemp(prefix="bench-exits-"))
    project = work / "plain-project"
    project.mkdir()
    shutil.copy(SCRIPT, project / "plain_ddp.py")
    results: dict[str, list[tuple[str, float]]] = {side: [] for side in SIDES}
    try:
        with lc.bench_stack(work) as stack:
            stack.wait_warm()
            for side, extra in SIDES.items():
                for run_no in range(runs):
                    outcome, seconds, _ = run_once(stack, project, extra)
                    results[side].append((outcome, seconds))
                    if (run_no + 1) % 10 == 0:
                        ended = sum(1 for o, _ in results[side] if o == "completed")
                        print(f"{side}: {run_no + 1}/{runs} runs, {ended} completed", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nexits: {runs} runs a side of a plain DDP script ({lc.NODES} nodes x {lc.PROCS} processes, gloo, "
          f"destroy_process_group() at the end) through `torchyard run`, {os.cpu_count()} cores; seconds per run "
          "(submit -> the CLI saw the job end)")
    print(f"{'side':<8}{'runs':>6}{'completed':>11}{'lingered':>10}{'failed':>8}{'hung':>6}{'median':>9}{'p90':>8}"
          f"{'max':>8}  verdict")
    missed = False
    for side, rows in results.items():
        count = {o: sum(1 for r, _ in rows if r == o) for o in ("completed", "lingered", "failed", "hung")}
        times = sorted(s for o, s in rows if o == "completed")
        median = lc.med(times) if times else float("nan")
        p90 = times[int(0.9 * (len(times) - 1))] if times else float("nan")
        slow = sum(1 for s in times if s > SLOW_FACTOR * median)
        ok = count["completed"] == len(rows) and slow == 0
        missed |= not ok
        verdict = "ok" if ok else f"MISSED ({len(rows) - count['completed']} not completed, {slow} slow)"
        print(f"{side:<8}{len(rows):>6}{count['completed']:>11}{count['lingered']:>10}{count['failed']:>8}"
              f"{count['hung']:>6}{median:>9.2f}{p90:>8.2f}{(times[-1] if times else float('nan')):>8.2f}  {verdict}")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())

"""Benchmark `ray`: a 2-node Ray cluster up (every worker joined, the driver connected and seeing
both nodes) after `POST /api/jobs` of a framework ray job, against `ray start` by hand, in the
same run.

Two local agents on loopback (`torchyard-server run`, as bench_launch.py), not network namespaces:
the machine has two cores, and a Ray node alone runs seven processes. Ray comes from the job's
requirements.txt: a warm-up job (not counted) installs it into each agent's cached environment,
and the hand side runs `ray start` with that same environment's Python, the same argv the
supervisor builds (supervisor/ray_launch.py: head on 127.0.0.1, every port chosen free) and the
same driver. Torchyard: the driver's `cluster 2` line (its log event's own timestamp) minus the
POST. By hand: the head's `ray start --head --block`, the worker's `ray start --address`, then the
driver once the GCS port answers; the time from the first command to the driver's line. Median of
3 each, sides alternating.

    make bench BENCH=ray
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import launch_common as lc  # noqa: E402
from integration.test_bring_your_own_code import upload  # noqa: E402
from torchyard.protocol import NodeLaunch  # noqa: E402
from torchyard.ray_node import wait_for_port  # noqa: E402
from torchyard.supervisor import ray_launch  # noqa: E402

ROUNDS = 3
RAY = "ray==2.60.0"
DRIVER = """\
import ray

ray.init()
print(f"cluster {sum(1 for n in ray.nodes() if n['Alive'])}", flush=True)
"""


def torchyard_up(stack, bundle: str, round_no: int, timeout: float = 900) -> float:
    submitted = time.time()
    job = stack.submit({"name": f"bench-ray-{round_no}", "code": {"bundle": bundle}, "entrypoint": "driver.py",
                        "framework": "ray", "resources": {"nodes": 2, "procs_per_node": 1},
                        "fault_tolerance": {"max_restarts": 0}})
    done = stack.wait_job(job["id"], {"completed", "failed", "stopped"}, timeout=timeout)
    assert done["status"] == "completed", f"{done['status_reason']}\n{stack.job_log_tail(job['id'])}"
    lc.end_job(stack, job["id"])
    up = [e for e in stack.logs(job["id"]) if e["line"] == "cluster 2"]
    assert up, stack.job_log_tail(job["id"])
    return lc.ts(up[0]) - submitted


def hand_up(work: Path, python: str, round_no: int, timeout: float = 300) -> float:
    base = work / f"hand-{round_no}"
    base.mkdir(parents=True)
    port = lc.free_port()
    procs: list[subprocess.Popen] = []
    env = ray_launch.ray_env(os.environ)
    started = time.monotonic()
    try:
        for rank in (0, 1):
            launch = NodeLaunch(job_id=0, attempt=round_no, node_id=0, node_rank=rank, nnodes=2, nproc_per_node=1,
                                world_size=2, master_addr="127.0.0.1", master_port=port, entrypoint="driver.py",
                                launcher="ray", peers=[{"node_rank": r, "host": "127.0.0.1"} for r in (0, 1)])
            temp = Path(tempfile.mkdtemp(prefix=f"rh{rank}", dir="/tmp"))
            argv = ray_launch.build_ray_start_argv(launch, python, ports=ray_launch.pick_ports("127.0.0.1", rank == 0),
                                                   temp=temp, object_store=ray_launch.MIN_OBJECT_STORE * 4)
            with open(base / f"ray-{rank}.log", "wb") as log:
                procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                                              start_new_session=True, stdin=subprocess.DEVNULL))
            if rank == 0:
                assert wait_for_port(f"127.0.0.1:{port}", timeout, alive=procs[0]), (base / "ray-0.log").read_text()
        # As a user would: the driver, retried until it sees both nodes.
        driver = base / "driver.py"
        driver.write_text(DRIVER.replace('print(f"cluster', 'import time\nwhile sum(1 for n in ray.nodes() if '
                                         'n["Alive"]) < 2: time.sleep(0.1)\nprint(f"cluster'))
        out = subprocess.run([python, str(driver)], env={**env, "RAY_ADDRESS": f"127.0.0.1:{port}"},
                             capture_output=True, text=True, timeout=timeout)
        assert "cluster 2" in out.stdout, out.stdout + out.stderr
        return time.monotonic() - started
    finally:
        for proc in procs:  # the group: `ray start --block` and every daemon it started
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        for temp in Path("/tmp").glob("rh[01]*"):
            if temp.is_dir() and temp.stat().st_uid == os.getuid():
                shutil.rmtree(temp, ignore_errors=True)


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="bench-ray-"))
    try:
        project = work / "project"
        project.mkdir()
        (project / "requirements.txt").write_text(RAY + "\n")
        (project / "driver.py").write_text(DRIVER)
        with lc.bench_stack(work) as stack:
            bundle, _ = upload(stack, project, work)
            prepared = time.monotonic()
            torchyard_up(stack, bundle, -1)  # warm-up: installs Ray into each agent's cached environment
            print(f"warm-up (installing {RAY} on both agents) took {time.monotonic() - prepared:.1f} s", flush=True)
            pythons = sorted(str(p) for p in work.rglob("envs/*/bin/python"))
            assert pythons, "no prepared environment found"
            hand, ours = [], []
            for round_no in range(ROUNDS):
                sides = ("hand", "torchyard") if round_no % 2 == 0 else ("torchyard", "hand")
                for side in sides:
                    if side == "hand":
                        hand.append(hand_up(work, pythons[0], round_no))
                    else:
                        ours.append(torchyard_up(stack, bundle, round_no))
                print(f"round {round_no + 1}/{ROUNDS}: by hand {hand[-1]:.2f} s, torchyard {ours[-1]:.2f} s", flush=True)
        base = lc.med(hand)
        print(f"\nray: 2-node Ray cluster up with the driver connected, {ROUNDS} rounds alternating, two local "
              f"agents on loopback, {os.cpu_count()} cores; seconds")
        print(lc.summary_header())
        print(lc.summary_row("by hand: 2 x ray start", hand, base))
        print(lc.summary_row("torchyard: submit -> cluster up", ours, base))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

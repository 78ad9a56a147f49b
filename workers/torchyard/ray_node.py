"""What one node of a Ray job runs (`python -m torchyard.ray_node RUN_DIR/ray.json`), in the job's
own Python (the one with Ray), inside the process group its node supervisor owns.

A worker node waits for the head's GCS port, then becomes `ray start --address HEAD --block`. The
head starts `ray start --head --block`, waits until every node of the job is alive in the cluster
(or the quorum timeout passes), then runs the user's driver with RAY_ADDRESS set and exits with
its exit code: the supervisor then kills the group (raylets, GCS, Ray's workers). Standard library
only: Ray itself is only imported by a helper process that counts the nodes.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from torchyard.protocol import RayPlan

EXIT_NO_QUORUM = 3
EXIT_RAY_DIED = 4

# Run by the job's Python: connects to the head like a driver, waits for N live nodes.
_COUNT_NODES = """
import sys, time, ray
address, want, deadline = sys.argv[1], int(sys.argv[2]), time.monotonic() + float(sys.argv[3])
ray.init(address=address, logging_level="ERROR", log_to_driver=False, configure_logging=False)
while True:
    alive = sum(1 for node in ray.nodes() if node.get("Alive"))
    if alive >= want:
        sys.exit(0)
    if time.monotonic() > deadline:
        print(f"only {alive} of {want} Ray nodes joined", file=sys.stderr)
        sys.exit(3)
    time.sleep(0.2)
"""


def say(message: str) -> None:
    print(f"[torchyard ray] {message}", file=sys.stderr, flush=True)


def wait_for_port(address: str, timeout: float, alive: subprocess.Popen | None = None) -> bool:
    """True once HOST:PORT accepts a connection; False after `timeout`, or once `alive` has exited."""
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (alive is None or alive.poll() is None):
        try:
            with socket.create_connection((host, int(port)), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.2)
    return False


def run_worker(plan: RayPlan) -> int:
    if not wait_for_port(plan["address"], plan["quorum_timeout"]):
        say(f"the Ray head {plan['address']} did not answer within {plan['quorum_timeout']:g} s")
        return EXIT_NO_QUORUM
    say(f"joining the Ray head {plan['address']}")
    os.execv(plan["ray_start"][0], plan["ray_start"])
    return 0  # not reached


def run_head(plan: RayPlan) -> int:
    started = time.monotonic()
    ray = subprocess.Popen(plan["ray_start"], stdin=subprocess.DEVNULL)
    timeout = float(plan["quorum_timeout"])
    if not wait_for_port(plan["address"], timeout, alive=ray):
        if ray.poll() is not None:
            say(f"ray start exited with code {ray.returncode}")
            return EXIT_RAY_DIED
        say(f"the Ray head's GCS did not listen on {plan['address']} within {timeout:g} s")
        return EXIT_NO_QUORUM
    counter = subprocess.Popen([plan["python"], "-c", _COUNT_NODES, plan["address"], str(plan["nnodes"]),
                                str(max(1.0, timeout - (time.monotonic() - started)))], stdin=subprocess.DEVNULL)
    while counter.poll() is None:
        if ray.poll() is not None:
            counter.kill()
            say(f"ray start exited with code {ray.returncode} before every node joined")
            return EXIT_RAY_DIED
        time.sleep(0.1)
    if counter.returncode != 0:
        say(f"not every node of the job joined the Ray cluster within {timeout:g} s")
        return EXIT_NO_QUORUM
    say(f"Ray cluster up: {plan['nnodes']} node(s) in {time.monotonic() - started:.1f} s; starting the driver")
    env = {**os.environ, "RAY_ADDRESS": plan["address"]}
    driver = subprocess.Popen(plan["driver"] or [], stdin=subprocess.DEVNULL, env=env)  # the head's: always set
    while driver.poll() is None:
        if ray.poll() is not None:
            say(f"ray start (the head) exited with code {ray.returncode} while the driver ran")
            driver.wait()
            return driver.returncode or EXIT_RAY_DIED
        time.sleep(0.1)
    say(f"the driver exited with code {driver.returncode}")
    return driver.returncode if driver.returncode >= 0 else 128 - driver.returncode


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    plan = json.loads(Path(args[0]).read_text())
    return run_head(plan) if plan["head"] else run_worker(plan)


if __name__ == "__main__":
    sys.exit(main())

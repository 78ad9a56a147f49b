"""The memory tier's parts of `make bench BENCH=goodput` (checkpointing.memory, issue 34):

    node loss       three hosts apart (network namespaces, as the fault tests): examples/mlp_ddp.py on 2
                    nodes and a hot spare, a metric every step; node 0's host loses its link for good;
                    steps lost = the last step any rank reported before the cut minus the step the next
                    attempt resumed from. Memory replicas (a memory checkpoint every step, one buddy)
                    against the store alone (a checkpoint every 20 steps). Goal: <= 1 step lost.
    replication     the bytes of a save (SIZE) sent to an agent's memory store (agent/memory.py, in a
                    process of its own, the SDK's transport) against a raw socket copy of the same bytes
                    to a process that only reads them, both on loopback. Goal: >= 0.9x the raw copy.
    step time       a training loop (a 2M-parameter MLP with Adam, 24 MB of state, batches of 1024, one
                    thread as the recipes set it: ~0.13 s a step here) with a memory checkpoint every step (the SDK's save(tier="memory"), an agent's store
                    in a process of its own) against none, in alternating blocks. Goal: <= 1.1x.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import launch_common as lc

SIZE = 256 << 20
KEY = "b" * 64
ROUNDS = 5
NODE_LOSS_ROUNDS = 3
RESUMED = re.compile(r"rank 0: resumed from checkpoint at step (\d+)")

_MEMORY_SERVER = textwrap.dedent("""
    from torchyard.agent.memory import MemoryHolder, MemoryServer
    holder = MemoryHolder()
    holder.admit(1, "KEY", 1 << 40)
    server = MemoryServer(holder, 0, host="127.0.0.1")
    print(server.port, flush=True)
    server.serve_forever()
""").replace("KEY", KEY)
_RAW_SERVER = textwrap.dedent("""
    import socket
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        with conn:
            size = int.from_bytes(conn.recv(8, socket.MSG_WAITALL), "big")
            data = bytearray(size)
            view, got = memoryview(data), 0
            while got < size:
                n = conn.recv_into(view[got:], min(size - got, 1 << 20))
                if not n:
                    break
                got += n
            conn.sendall(b"k")
""")


def _server(code: str) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, cwd=lc.ROOT)
    assert proc.stdout is not None
    return proc, int(proc.stdout.readline())


def replication() -> dict[str, list[float]]:
    """MB/s of SIZE bytes to the memory store and over a raw socket, ROUNDS each, alternating."""
    from torchyard.sdk.checkpoint import memory as memory_tier

    os.environ["TORCHYARD_MEMORY_KEY"] = KEY
    data = memoryview(os.urandom(1 << 20) * (SIZE >> 20))
    sha256 = hashlib.sha256(data).hexdigest()
    store, store_port = _server(_MEMORY_SERVER)
    raw, raw_port = _server(_RAW_SERVER)
    measured: dict[str, list[float]] = {"memory store": [], "raw socket": []}
    try:
        replicator = memory_tier.Replicator()
        holder: memory_tier.Holder = {"machine": "local", "url": f"http://127.0.0.1:{store_port}"}
        for round_no in range(ROUNDS):
            for side in ("memory store", "raw socket") if round_no % 2 == 0 else ("raw socket", "memory store"):
                started = time.perf_counter()
                if side == "memory store":
                    replicator.put_all([holder], memory_tier.job_path(1, round_no, "state.pt"), data, sha256)
                else:
                    with socket.create_connection(("127.0.0.1", raw_port)) as conn:
                        conn.sendall(len(data).to_bytes(8, "big"))
                        conn.sendall(data)
                        assert conn.recv(1) == b"k"
                measured[side].append(SIZE / 2**20 / (time.perf_counter() - started))
        replicator.close()
    finally:
        for proc in (store, raw):
            proc.kill()
            proc.wait()
    return measured


_LOOP = textwrap.dedent("""
    import json, os, sys, time
    import torch
    from torch import nn
    from torchyard import sdk
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    x, y = torch.randn(1024, 1024), torch.randn(1024, 1024)
    blocks, steps = int(sys.argv[1]), int(sys.argv[2])
    times = {"none": [], "memory": []}
    step = 0

    def train(save):
        global step
        started = time.perf_counter()
        for _ in range(steps):
            step += 1
            optimizer.zero_grad(set_to_none=True)
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
            if save:
                sdk.checkpoint.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, step,
                                    tier="memory")
        sdk.checkpoint.wait()
        return (time.perf_counter() - started) / steps

    train(True)  # the first save allocates the staging buffers; the first steps warm up
    for block in range(blocks):
        for side in (("none", "memory") if block % 2 == 0 else ("memory", "none")):
            times[side].append(train(side == "memory"))
    print("RESULT " + json.dumps(times), file=sys.stderr, flush=True)
""")


def step_time(blocks: int = 6, steps: int = 40) -> dict[str, list[float]]:
    """Mean step seconds per block, without saves and with a memory checkpoint every step."""
    store, port = _server(_MEMORY_SERVER)
    with tempfile.TemporaryDirectory() as work:
        config = Path(work) / "config.json"
        config.write_text(json.dumps({"checkpointing": {"memory": {
            "every_n_steps": 1, "holders": [{"machine": "local", "url": f"http://127.0.0.1:{port}"}]}}}))
        env = {**os.environ, "TORCHYARD_CONFIG": str(config), "TORCHYARD_MEMORY_KEY": KEY, "TORCHYARD_JOB_ID": "1",
               "RANK": "0", "WORLD_SIZE": "1", "PYTHONPATH": str(lc.ROOT / "workers")}
        try:
            done = subprocess.run([sys.executable, "-c", _LOOP, str(blocks), str(steps)], env=env, cwd=work,
                                  capture_output=True, text=True, timeout=900)
        finally:
            store.kill()
            store.wait()
    found = [line for line in done.stderr.splitlines() if line.startswith("RESULT ")]
    if done.returncode != 0 or not found:
        raise AssertionError(f"the loop failed ({done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(found[-1].removeprefix("RESULT "))


def node_loss(work: Path) -> dict[str, list[float]]:
    """Steps lost when node 0's host is cut for good: memory replicas against the store alone."""
    from integration.netns import separate_hosts

    lost: dict[str, list[float]] = {"memory replicas": [], "store only": []}
    with separate_hosts(work / "hosts", hosts=3) as cluster:
        for round_no in range(NODE_LOSS_ROUNDS):
            for side in ("memory replicas", "store only") if round_no % 2 == 0 else ("store only", "memory replicas"):
                lost[side].append(_node_loss_round(cluster, round_no, side))
                print(f"node loss round {round_no + 1}/{NODE_LOSS_ROUNDS} {side}: {lost[side][-1]:.0f} steps lost",
                      flush=True)
    return lost


def _node_loss_round(cluster: Any, round_no: int, side: str) -> float:
    stack = cluster.stack
    memory = side == "memory replicas"
    checkpointing: dict[str, Any] = {"enabled": True, "every_n_steps": 10000 if memory else 20}
    if memory:
        checkpointing["memory"] = {"every_n_steps": 1, "replicas": 1, "budget": 64 << 20}
    job = stack.submit({
        "name": f"bench-node-loss-{round_no}-{'memory' if memory else 'store'}", "entrypoint": lc.SCRIPT,
        "args": ["--steps", "1000000", "--step-sleep", "0.1", "--report-every", "1", "--log-every", "100000"],
        "resources": {"nodes": 2, "procs_per_node": 1, "spares": 1}, "checkpointing": checkpointing,
        "fault_tolerance": {"max_restarts": 2, "heartbeat_timeout": 4},
    })
    job_id = job["id"]
    deadline = time.monotonic() + 180

    def last_step(attempt: int) -> int:
        return max((e["step"] for e in stack.events(job_id, "metric") if e["attempt"] == attempt), default=0)

    # Past the store's first checkpoint (step 20), and a few steps beyond: where the cut falls in
    # the store's interval varies round to round, as a real loss's would.
    while last_step(0) < 33 + 4 * round_no:
        assert time.monotonic() < deadline, stack.job_log_tail(job_id)
        time.sleep(0.2)
    node0 = next(n for n in stack.job(job_id)["nodes"] if n["attempt"] == 0 and n["node_rank"] == 0)
    victim = cluster.host_of(node0["machine"]["id"])
    victim.link_down()
    try:
        resumed = None
        while resumed is None:
            assert time.monotonic() < deadline, stack.job_log_tail(job_id)
            resumed = next((int(m.group(1)) for e in stack.logs(job_id) if e["attempt"] == 1
                            and (m := RESUMED.search(e["line"]))), None)
            time.sleep(0.3)
        reached = last_step(0)
    finally:
        victim.link_up()
    lc.end_job(stack, job_id, timeout=120)
    cluster.wait_machine(victim, {"online"}, timeout=120)
    return float(reached - resumed)

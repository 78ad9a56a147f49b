"""Memory checkpoints on hosts that are really apart (network namespaces, netns.py): a job of 2 nodes keeps
every step's checkpoint in memory, rank 0's machine's and its buddy's (node 1's machine); rank 0's host
loses its link for good, and the job goes on, its hot spare in node 0's place, from the buddy's copy:
at most one step behind the last step reached, never from the store."""

from __future__ import annotations

import re
import time

import pytest

from .netns import netns_unavailable
from .test_separate_hosts import FINAL, explain

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")
RESUMED = re.compile(r"resuming from the memory checkpoint at step (\d+), held by (\S+)")


def test_a_lost_machine_resumes_from_its_buddys_memory(cluster):
    stack = cluster.stack
    job = stack.submit({
        "name": "memory-buddy", "entrypoint": "examples/mlp_ddp.py",
        "args": ["--steps", "100000", "--step-sleep", "0.1", "--report-every", "1", "--log-every", "1000"],
        "resources": {"nodes": 2, "procs_per_node": 1, "spares": 1},
        # The store's checkpoint only at step 10: the resume must come from memory to be any closer.
        "checkpointing": {"enabled": True, "every_n_steps": 10000,
                          "memory": {"every_n_steps": 1, "replicas": 1, "budget": 64 << 20}},
        "fault_tolerance": {"max_restarts": 2, "heartbeat_timeout": 4},
    })
    job_id = job["id"]

    def memory_committed() -> bool:
        return any(c["tier"] == "memory" and c["step"] >= 20
                   for c in stack.api("GET", f"/api/jobs/{job_id}/checkpoints").json())

    assert stack.watch_job(job_id, memory_committed, 120, on=frozenset({"checkpoint"})), explain(cluster, job_id)
    detail = stack.job(job_id)
    nodes = {n["node_rank"]: n["machine"] for n in detail["nodes"] if n["attempt"] == 0}
    victim = cluster.host_of(nodes[0]["id"])
    victim.link_down()
    try:
        deadline = time.monotonic() + 120
        while (current := stack.job(job_id))["attempt"] < 1 or current["status"] != "running":
            assert current["status"] not in FINAL and time.monotonic() < deadline, explain(cluster, job_id)
            time.sleep(0.3)
        # The last step any rank reached before the cut (rank 1, on the machine that lived, goes on
        # reporting until its collective with the lost rank 0 hangs).
        reached = max(e["step"] for e in stack.events(job_id, "metric") if e["attempt"] == 0)
        resumed = None
        while resumed is None:
            assert time.monotonic() < deadline, explain(cluster, job_id)
            resumed = next((m for e in stack.logs(job_id) if e["attempt"] == 1
                            and (m := RESUMED.search(e["line"]))), None)
            time.sleep(0.3)
        step, holder = int(resumed.group(1)), resumed.group(2)
        # From the buddy: node 1's machine, which lived; at most one step behind.
        assert holder == nodes[1]["name"], (holder, nodes)
        assert reached - 1 <= step <= reached, (step, reached)
        lines = [e["line"] for e in stack.logs(job_id) if e["attempt"] == 1]
        assert not any("cannot be read" in line for line in lines), lines[-30:]
        assert stack.job(job_id)["status"] == "running"
    finally:
        victim.link_up()
    stack.api("POST", f"/api/jobs/{job_id}/stop")
    assert stack.wait_job(job_id, FINAL, timeout=120)["status"] == "stopped"
    assert stack.wait_no_job_processes(job_id) == []

"""An elastic job (resources.nodes "2:3") on three hosts that are really apart (network namespaces,
netns.py): one host's link goes down for good mid-run, the job goes on with 2 nodes from its last
checkpoint soon after that node is declared lost; the link comes back, and the job grows to 3 nodes
again at a checkpoint and completes. The timeline has both resizes; the ranks' own logs show the
global batch unchanged and the global sample position continuous."""

from __future__ import annotations

import re
import time
from datetime import datetime

import pytest

from .netns import netns_unavailable
from .test_separate_hosts import FINAL, explain

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

STEPS = 400
BATCH = 12


def _ts(event: dict) -> float:
    return datetime.fromisoformat(event["ts"]).timestamp()


def test_a_partitioned_host_shrinks_the_job_and_its_return_grows_it_back(cluster):
    stack = cluster.stack
    job = stack.submit({
        "name": "elastic-apart", "entrypoint": "examples/mlp_ddp.py",
        "args": ["--steps", str(STEPS), "--step-sleep", "0.05"],
        "resources": {"nodes": "2:3", "procs_per_node": 1},
        "hyperparameters": {"batch_size": BATCH}, "scaling": {"mode": "keep_global_batch"},
        "checkpointing": {"enabled": True, "every_n_steps": 10, "keep": 2},
        "fault_tolerance": {"max_restarts": 3, "heartbeat_timeout": 4},
        "elastic": {"min_interval": 5},
    })
    stack.wait_checkpoint(job["id"])
    detail = stack.job(job["id"])
    assert detail["world_size"] == 3, explain(cluster, job["id"])
    victim = cluster.host_of(next(n for n in detail["nodes"] if n["node_rank"] == 2)["machine"]["id"])
    victim.link_down()
    try:
        # Lost after the heartbeat timeout; then the job goes on with the two hosts it still has.
        deadline = time.monotonic() + 90
        while (current := stack.job(job["id"]))["attempt"] < 1 or current["status"] != "running":
            assert current["status"] not in FINAL and time.monotonic() < deadline, explain(cluster, job["id"])
            time.sleep(0.3)
        assert current["world_size"] == 2, explain(cluster, job["id"])
        states = stack.events(job["id"], "state")
        lost = next(e for e in states if e.get("scope") == "node" and e["status"] == "lost")
        shrunk = next(e for e in states if e.get("scope") == "job" and e["status"] == "dispatching"
                      and e["reason"].startswith("shrunk from 3 to 2 nodes"))
        assert shrunk["reason"].startswith(f"shrunk from 3 to 2 nodes: machine {victim.machine_name} lost"), shrunk
        training = None
        while training is None:  # the first step of the shrunk attempt
            assert time.monotonic() < deadline, explain(cluster, job["id"])
            training = next((e for e in stack.events(job["id"], "metric") if e["attempt"] >= 1), None)
            time.sleep(0.3)
        # The shrunk attempt trains while the victim is still cut off (its link comes back only
        # below): the job did not wait for it. How soon it trains again is bench_elastic.py's.
        assert _ts(training) >= _ts(lost), (lost, training)
    finally:
        victim.link_up()

    final = stack.wait_job(job["id"], FINAL, timeout=300)
    assert final["status"] == "completed", explain(cluster, job["id"])
    assert final["world_size"] == 3, explain(cluster, job["id"])
    reasons = [e["reason"] for e in stack.events(job["id"], "state")
               if e.get("scope") == "job" and e["status"] == "dispatching"]
    assert any(r.startswith("shrunk from 3 to 2 nodes") for r in reasons), reasons
    assert any(r.startswith("grown from 2 to 3 nodes") for r in reasons), reasons

    # Every attempt trained with the same global batch, and each resumed at the sample its
    # checkpoint recorded: step x global batch.
    logs = stack.logs(job["id"])
    for event in logs:
        match = re.search(r"batch (\d+) per rank \(global (\d+)\)", event["line"])
        if match:
            assert int(match.group(2)) == BATCH, event
        resumed = re.search(r"resumed from checkpoint at step (\d+)", event["line"])
        if resumed:
            step = int(resumed.group(1))
            starts = [e["line"] for e in logs if e["attempt"] == event["attempt"] and "from global sample" in e["line"]]
            assert starts and all(line.endswith(f"from global sample {step * BATCH}") for line in starts), starts
    assert stack.wait_no_job_processes(job["id"]) == []

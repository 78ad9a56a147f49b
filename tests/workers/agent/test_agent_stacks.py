"""`torchyard stacks`, the agent's side (agent/stacks.py): every rank of a node found by its
environment, its own children left out, and its Python stack read from outside, for real."""

from __future__ import annotations

import os
import subprocess
import sys

from supervisor_support import next_job_id
from torchyard import protocol
from torchyard.agent.stacks import publish_stacks, rank_processes

# A rank that waits in a function of its own name, with a child of its own (a DataLoader worker
# would be one) that inherits its RANK.
RANK = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])

def waiting_for_the_next_batch():
    print("ready", flush=True)
    time.sleep(60)

waiting_for_the_next_batch()
"""


def start_rank(job_id: int, rank: int, node_rank: int) -> subprocess.Popen:
    env = {**os.environ, protocol.ENV_JOB_ID: str(job_id), protocol.ENV_ATTEMPT: "1",
           protocol.ENV_NODE_RANK: str(node_rank), "RANK": str(rank)}
    proc = subprocess.Popen([sys.executable, "-c", RANK], env=env, stdout=subprocess.PIPE, text=True,
                            start_new_session=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def test_each_rank_of_the_node_is_read_once_in_rank_order_and_published_as_one_event():
    job_id = next_job_id()
    ranks = [start_rank(job_id, rank, node_rank=1) for rank in (3, 2)]
    elsewhere = start_rank(job_id, 0, node_rank=0)  # another node's rank
    try:
        found = rank_processes(job_id, 1, 1)
        assert {rank: proc.pid for rank, proc in found.items()} == {3: ranks[0].pid, 2: ranks[1].pid}
        published: list[dict] = []
        assert publish_stacks(job_id, 1, 1, node_id=77, request="r1", publish=published.append) == 2
        [event] = published
        assert (event["type"], event["job"], event["attempt"], event["node"], event["node_rank"], event["request"]) == (
            protocol.STACKS, job_id, 1, 77, 1, "r1")
        assert [r["rank"] for r in event["ranks"]] == [2, 3]
        for read, proc in zip(event["ranks"], (ranks[1], ranks[0]), strict=True):
            assert read["pid"] == proc.pid and read["process_state"] == "sleeping"
            assert "waiting_for_the_next_batch" in read["stack"], read["stack"]
            # Outside any collective, in its own sleep.
            assert read["waits_in"] == "" and read["frame"].startswith("waiting_for_the_next_batch"), read
    finally:
        for proc in (*ranks, elsewhere):
            os.killpg(proc.pid, 9)
            proc.wait()

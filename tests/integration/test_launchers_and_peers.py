"""Launchers other than torchrun on hosts that are really apart (network namespaces, netns.py), and
sdk.peers() learning the job's membership through the machine side: `launcher: none` runs a script
once per node, `launcher: command` the user's own torch.distributed.run, and a node held back makes
peers() time out naming it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from .netns import Cluster, netns_unavailable
from .test_bring_your_own_code import upload

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

FINAL = {"completed", "failed", "stopped"}

PEERS_PROBE = """\
import sys
from torchyard import sdk

try:
    found = sdk.peers(quorum=int(sys.argv[1]), timeout=float(sys.argv[2]))
except TimeoutError as exc:
    print(f"peers timed out: {exc}", flush=True)
    sys.exit(4)
print(f"peers {','.join(found)} as rank {sdk.rank()} of {sdk.world_size()}", flush=True)
"""

ALLREDUCE = """\
import os
import torch
import torch.distributed as dist

dist.init_process_group("gloo")
total = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(total)
print(f"rank {dist.get_rank()} of {dist.get_world_size()} on node {os.environ['NODE_RANK']}: sum {total.item():g}",
      flush=True)
dist.barrier()
dist.destroy_process_group()
"""


@pytest.fixture(scope="module")
def bundle(cluster: Cluster, tmp_path_factory) -> str:
    project: Path = tmp_path_factory.mktemp("project")
    (project / "peers_probe.py").write_text(PEERS_PROBE)
    (project / "allreduce.py").write_text(ALLREDUCE)
    sha256, _ = upload(cluster.stack, project, tmp_path_factory.mktemp("packed"))
    return sha256


def finish(cluster: Cluster, job_id: int, timeout: float = 120) -> dict:
    return cluster.stack.wait_job(job_id, FINAL, timeout=timeout)


def worker_lines(cluster: Cluster, job_id: int) -> list[str]:
    return [e["line"] for e in cluster.stack.logs(job_id)]


def test_launcher_none_peers_are_the_two_host_addresses_in_node_order(cluster, bundle):
    job = cluster.stack.submit({
        "name": "peers", "code": {"bundle": bundle}, "entrypoint": "peers_probe.py", "args": ["2", "60"],
        "resources": {"nodes": 2}, "distributed": {"launcher": "none"}, "fault_tolerance": {"max_restarts": 0}})
    done = finish(cluster, job["id"])
    lines = worker_lines(cluster, job["id"])
    assert done["status"] == "completed", f"{done['status_reason']}\n" + "\n".join(lines[-30:])
    plan = done["plan"]
    assert plan["launcher"] == "none"
    nodes = sorted(plan["nodes"], key=lambda n: n["node_rank"])
    hosts = [node["host"] for node in nodes]
    # Each node's host is the namespace address of the machine the plan put it on, two apart.
    assert hosts == [cluster.host_of(node["machine_id"]).address for node in nodes] and len(set(hosts)) == 2
    for rank in (0, 1):
        assert f"peers {','.join(hosts)} as rank {rank} of 2" in lines, cluster.stack.job_log_tail(job["id"], 60)


def test_launcher_command_runs_the_users_torch_distributed_run_across_hosts(cluster, bundle):
    command = ["python", "-m", "torch.distributed.run", "--nnodes", "${NNODES}", "--node-rank", "${NODE_RANK}",
               "--nproc-per-node", "1", "--master-addr", "${MASTER_ADDR}", "--master-port", "${MASTER_PORT}",
               "allreduce.py"]
    job = cluster.stack.submit({
        "name": "command", "code": {"bundle": bundle}, "resources": {"nodes": 2},
        "distributed": {"launcher": "command", "command": command}, "fault_tolerance": {"max_restarts": 0}})
    done = finish(cluster, job["id"], timeout=180)
    lines = worker_lines(cluster, job["id"])
    assert done["status"] == "completed", f"{done['status_reason']}\n" + "\n".join(lines[-30:])
    assert "rank 0 of 2 on node 0: sum 3" in lines and "rank 1 of 2 on node 1: sum 3" in lines


def test_a_command_that_exits_non_zero_fails_the_job_with_its_exit_code(cluster):
    job = cluster.stack.submit({
        "name": "command-fails", "resources": {"nodes": 1},
        "distributed": {"launcher": "command", "command": ["python", "-c", "import sys; sys.exit(3)"]},
        "fault_tolerance": {"max_restarts": 0}})
    done = finish(cluster, job["id"])
    assert done["status"] == "failed"
    assert "the command exited with code 3" in done["status_reason"], done["status_reason"]


def test_a_node_held_back_makes_peers_time_out_naming_it(cluster, bundle):
    # host-1's agent dies right before the job is placed on both hosts: its machine still looks
    # online for a few seconds, so node 1 is planned there, and its launch is never taken.
    held_back = cluster.hosts[1]
    held_back.kill_agent()
    job = cluster.stack.submit({
        "name": "held-back", "code": {"bundle": bundle}, "entrypoint": "peers_probe.py", "args": ["2", "3"],
        "resources": {"nodes": 2}, "placement": {"machines": [cluster.hosts[0].machine_name, held_back.machine_name]},
        "distributed": {"launcher": "none"}, "fault_tolerance": {"max_restarts": 0}})
    deadline = time.monotonic() + 90
    while not (said := [line for line in worker_lines(cluster, job["id"]) if "peers timed out" in line]):
        assert time.monotonic() < deadline, cluster.stack.job_log_tail(job["id"])
        time.sleep(0.3)
    assert f"missing: node 1 ({held_back.machine_name}, launching)" in said[0], said
    assert said[0].startswith("peers timed out: 1 of 2 node(s) up after 3 s"), said
    done = finish(cluster, job["id"])
    assert done["status"] == "failed" and "python exited with code 4" in done["status_reason"]

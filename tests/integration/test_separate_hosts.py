"""Jobs across hosts that are really apart (network namespaces joined by a bridge, see netns.py):
rendezvous and collectives cross the bridge. The faults (a link down for a moment or for good, a
host killed, ...) are in test_kill_matrix.py."""

from __future__ import annotations

import contextlib
import time

import pytest

from .netns import Cluster, netns_unavailable

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

FINAL = {"completed", "failed", "stopped"}


def two_node_spec(name: str, steps: int, **extra) -> dict:
    # No GLOO_SOCKET_IFNAME: the hostname resolves to 127.0.0.1 here (like Debian's 127.0.1.1), so
    # these jobs only meet if the node supervisor picks the interface towards the master itself.
    return {"name": name, "entrypoint": "examples/mlp_ddp.py", "args": ["--steps", str(steps), "--step-sleep", "0.05"],
            "resources": {"nodes": 2, "procs_per_node": 1}, **extra}


def rank_hosts(cluster: Cluster, job_id: int) -> dict[int, set[str]]:
    """Global rank -> the namespaces its training process was seen in, right now."""
    seen: dict[int, set[str]] = {}
    for host in cluster.hosts:
        for proc in host.processes():
            try:
                env = proc.environ()
            except Exception:  # gone meanwhile
                continue
            if env.get("TORCHYARD_JOB_ID") == str(job_id) and "RANK" in env:
                seen.setdefault(int(env["RANK"]), set()).add(host.netns)
    return seen


def explain(cluster: Cluster, job_id: int) -> str:
    """What a failing assertion shows: the job's and nodes' transitions, its last log lines, the stack's."""
    states = "\n".join(f"{e['ts']} {e.get('scope')} node {e.get('node_rank')} attempt {e.get('attempt')}: "
                       f"{e['status']} {(e.get('reason') or '')[:200]}" for e in cluster.stack.events(job_id, "state"))
    return (f"--- states ---\n{states}\n--- job log ---\n{cluster.stack.job_log_tail(job_id)}\n"
            f"--- stack log ---\n{cluster.stack.log_tail(30)}")


def test_a_two_node_job_runs_across_two_hosts(cluster):
    job = cluster.stack.submit(two_node_spec("apart", 30, fault_tolerance={"max_restarts": 0}))
    # Sample where the ranks live while they run: torchrun's workers carry RANK and the job id.
    seen: dict[int, set[str]] = {}
    deadline = time.monotonic() + 120
    while (current := cluster.stack.job(job["id"]))["status"] not in FINAL:
        assert time.monotonic() < deadline, explain(cluster, job["id"])
        for rank, namespaces in rank_hosts(cluster, job["id"]).items():
            seen.setdefault(rank, set()).update(namespaces)
        time.sleep(0.1)
    assert current["status"] == "completed", f"{current['status_reason']}\n{explain(cluster, job['id'])}"

    plan = current["plan"]
    addresses = {h.address for h in cluster.hosts}
    assert plan["master_addr"] in addresses and plan["master_addr"] != "127.0.0.1"
    machines = [node["machine_id"] for node in plan["nodes"]]
    assert len(set(machines)) == 2
    # The master is node 0's host, and each node ran where the plan put it.
    assert plan["master_addr"] == cluster.host_of(plan["nodes"][0]["machine_id"]).address
    assert seen.keys() == {0, 1}, f"ranks seen: {seen}"
    for node in plan["nodes"]:
        assert seen[node["rank_start"]] == {cluster.host_of(node["machine_id"]).netns}
    assert seen[0] != seen[1]
    assert any("rank 1: done at step 30" in e["line"] for e in cluster.stack.logs(job["id"]))


def test_the_job_moves_every_byte_on_the_faster_of_two_networks_and_names_the_throttled_pair(cluster):
    """Two networks between the hosts; the one their registered addresses are on (eth0, what the
    hostname resolves to) throttled to 50 Mbit/s with tc. The preflight measures both, flags the
    throttled pair and pins the job to the other (eth1): its collectives, and after a rank is killed
    its recovery's, are counted on eth1, while eth0 carries only the control plane's few bytes."""
    hosts = cluster.hosts
    with cluster.second_network() as fabric, contextlib.ExitStack() as slow:
        for host in hosts:
            slow.enter_context(host.throttled("eth0", "50mbit"))
        before = {h.netns: (h.sent_bytes("eth0"), h.sent_bytes("eth1")) for h in hosts}
        # 0.28 M parameters: about 1.1 MB per all-reduce from each node, 60 of them.
        job = cluster.stack.submit(two_node_spec("links", 60, hyperparameters={"hidden": 512},
                                                 checkpointing={"every_n_steps": 10}))
        cluster.stack.wait_checkpoint(job["id"])
        cluster.stack.kill_rank(job["id"], "1", "0")
        done = cluster.stack.wait_job(job["id"], FINAL, timeout=180)
        assert done["status"] == "completed", f"{done['status_reason']}\n{explain(cluster, job['id'])}"
        sent = {h.netns: (h.sent_bytes("eth0") - before[h.netns][0], h.sent_bytes("eth1") - before[h.netns][1])
                for h in hosts}

    assert done["attempt"] >= 1, explain(cluster, job["id"])
    links = done["links"]
    assert links["chosen"] == f"{fabric}.0/24" and links["attempt"] == 0, links
    by_network = {n["network"]: n for n in links["networks"]}
    registered = by_network[f"{cluster.gateway.rsplit('.', 1)[0]}.0/24"]
    assert registered["registered"] and not registered["chosen"] and set(registered["interfaces"].values()) == {"eth0"}
    assert set(by_network[links["chosen"]]["interfaces"].values()) == {"eth1"}
    assert registered["slowest_mb_per_s"] < 10 < by_network[links["chosen"]]["slowest_mb_per_s"], links["summary"]
    assert [p["flagged"] for p in links["pairs"] if p["network"] == registered["network"]] == [True], links
    machines = [cluster.host_of(n["machine_id"]) for n in done["plan"]["nodes"]]
    assert links["master_address"] == f"{fabric}.{10 + machines[0].index}"
    # Measured once: the relaunch on the same machines reused the choice and probed nothing.
    logs = cluster.stack.logs(job["id"])
    lines = [e["line"] for e in logs]
    assert sorted((e["attempt"], e["node_rank"]) for e in logs if "links measured in" in e["line"]) == [(0, 0), (0, 1)]
    pinned = {(e["attempt"], e["node_rank"]) for e in logs if "GLOO_SOCKET_IFNAME=eth1" in e["line"]}
    assert {(0, 0), (0, 1), (1, 0), (1, 1)} <= pinned, lines
    for host in machines:
        eth0, eth1 = sent[host.netns]
        assert eth1 > 30e6 and eth0 < 5e6, f"{host.netns} sent {eth0} bytes on eth0, {eth1} on eth1"
    # Each machine's interfaces carry their figures.
    measured = cluster.machine(machines[1])["measured_links"]
    assert measured["eth1"]["mb_per_s"] > 10 > measured["eth0"]["mb_per_s"] and measured["eth0"]["job"] == job["id"]

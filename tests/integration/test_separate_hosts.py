"""Jobs across hosts that are really apart (network namespaces joined by a bridge, see netns.py):
rendezvous and collectives cross the bridge, and a host whose link goes down for good is a machine
lost, from which the job recovers onto the hosts left."""

from __future__ import annotations

import time

import pytest

from .netns import Cluster, netns_unavailable, separate_hosts

pytestmark = pytest.mark.skipif(bool(netns_unavailable()), reason=netns_unavailable() or "available")

FINAL = {"completed", "failed", "stopped"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    # Three hosts: two for the 2-node jobs and a spare for the recovery from a lost host.
    with separate_hosts(tmp_path_factory.mktemp("separate-hosts"), hosts=3) as made:
        yield made


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


def test_a_link_down_for_3_s_is_a_blip_and_the_job_goes_on(cluster):
    job = cluster.stack.submit(two_node_spec("blip", 200, fault_tolerance={"max_restarts": 1, "heartbeat_timeout": 10}))
    deadline = time.monotonic() + 120
    while not any((e.get("step") or 0) >= 20 for e in cluster.stack.events(job["id"], "metric")):
        assert time.monotonic() < deadline, f"no progress\n{explain(cluster, job['id'])}"
        time.sleep(0.3)
    victim = cluster.host_of(cluster.stack.job(job["id"])["plan"]["nodes"][1]["machine_id"])
    victim.link_down()
    try:
        time.sleep(3)  # under heartbeat_timeout and the machine's offline threshold
    finally:
        victim.link_up()
    final = cluster.stack.wait_job(job["id"], FINAL, timeout=120)
    # Nothing happened: no node lost, no restart; what the supervisor buffered meanwhile arrived.
    assert final["status"] == "completed" and final["attempt"] == 0, f"{final['status_reason']}\n{explain(cluster, job['id'])}"
    node_states = [e["status"] for e in cluster.stack.events(job["id"], "state") if e.get("scope") == "node"]
    assert "lost" not in node_states and "failed" not in node_states, explain(cluster, job["id"])
    assert any("rank 1: done at step 200" in e["line"] for e in cluster.stack.logs(job["id"]))
    steps = sorted({e["step"] for e in cluster.stack.events(job["id"], "metric") if e.get("rank") == 1})
    assert steps[-1] == 200


def test_a_host_whose_link_goes_down_for_good_is_replaced_by_the_spare(cluster):
    spec = two_node_spec("partitioned", 300, checkpointing={"every_n_steps": 10},
                         fault_tolerance={"max_restarts": 2, "heartbeat_timeout": 6})
    job = cluster.stack.submit(spec)
    deadline = time.monotonic() + 120
    while not cluster.stack.api("GET", f"/api/jobs/{job['id']}/checkpoints").json():
        assert time.monotonic() < deadline, f"no checkpoint committed\n{explain(cluster, job['id'])}"
        time.sleep(0.3)
    first = cluster.stack.job(job["id"])
    used = {node["machine_id"] for node in first["plan"]["nodes"]}
    # The worker's host: cut off, its rank's collectives with the master hang rather than fail, so
    # only the control plane's heartbeat timeout can notice (the node, then its machine, go silent).
    victim = cluster.host_of(first["plan"]["nodes"][1]["machine_id"])
    assert victim.can_reach(cluster.gateway, cluster.web_port)
    victim.link_down()
    try:
        assert not victim.can_reach(cluster.gateway, cluster.web_port, timeout=1.0)
        final = cluster.stack.wait_job(job["id"], FINAL, timeout=180)
    finally:
        victim.link_up()
    assert final["status"] == "completed", f"{final['status_reason']}\n{explain(cluster, job['id'])}"
    # Recovered onto the master's host and the spare, never back onto the partitioned one.
    spare = next(h for h in cluster.hosts if h.machine_id not in used)
    last = {node["machine_id"] for node in final["plan"]["nodes"]}
    assert final["attempt"] >= 1 and last == (used - {victim.machine_id}) | {spare.machine_id}, explain(cluster, job["id"])
    lost = [e for e in cluster.stack.events(job["id"], "state") if e.get("scope") == "node" and e["status"] == "lost"]
    assert [(e["node_rank"], e["attempt"]) for e in lost[:1]] == [(1, 0)], explain(cluster, job["id"])


"""A job's links (jobs/links.py): the master's preflight report kept on the job and on its machines'
interfaces, shown by the API, and its choice handed to a relaunch on the machines it measured."""

from __future__ import annotations

import pytest
import redis
from factories import bring_online, make_job, make_node
from torchyard import protocol
from torchyard_server.jobs.control.links import reused_links
from torchyard_server.jobs.models import Job
from torchyard_server.jobs.spec.plan import Plan
from torchyard_server.machines.models import Machine
from torchyard_server.streaming.ingest import Ingest

from jobs.controller.test_stalls import drain

T0 = 1_700_000_000.0


def report(machines: list[str]) -> dict:
    """A master's report for a 2-node job: eth0 throttled, ib0 fast and chosen."""
    return {
        "seconds": 0.6, "machines": {str(i): m for i, m in enumerate(machines)},
        "networks": [
            {"network": "10.0.0.0/24", "interfaces": {"0": "eth0", "1": "eth0"}, "slowest_mb_per_s": 6.1,
             "latency_ms": 0.3, "usable": True, "registered": True, "chosen": False},
            {"network": "10.9.0.0/24", "interfaces": {"0": "ib0", "1": "ib0"}, "slowest_mb_per_s": 900.0,
             "latency_ms": 0.05, "usable": True, "registered": False, "chosen": True}],
        "pairs": [{"network": "10.0.0.0/24", "a": 0, "b": 1, "mb_per_s": 6.1, "latency_ms": 0.3, "flagged": True},
                  {"network": "10.9.0.0/24", "a": 0, "b": 1, "mb_per_s": 900.0, "latency_ms": 0.05, "flagged": False}],
        "median_mb_per_s": 453.05, "chosen": "10.9.0.0/24",
        "addresses": {machines[0]: "10.9.0.1", machines[1]: "10.9.0.2"}, "master_address": "10.9.0.1",
        "summary": "traffic pinned to 10.9.0.0/24. ...",
    }


@pytest.mark.django_db(transaction=True)
def test_the_masters_link_report_is_kept_on_the_job_and_credited_to_each_machines_interfaces(redis_url, owner, api):
    client = redis.Redis.from_url(redis_url)
    client.delete(protocol.EVENT_STREAM)
    machines = [bring_online(name)[0] for name in ("gpu-a", "gpu-b")]
    job = make_job(name="j", owner=owner, status=Job.Status.RUNNING, world_size=2, progress={})
    nodes = [make_node(job, node_rank=r, machine=m) for r, m in enumerate(machines)]
    ingest = Ingest(redis_url)
    ingest.ensure_group()

    def preflight(node, seq: int, **payload) -> None:
        client.xadd(protocol.EVENT_STREAM, protocol.encode_event({
            "type": protocol.PREFLIGHT, "job": job.pk, "attempt": 0, "node": node.pk, "node_rank": node.node_rank,
            "seq": seq, "ts": T0, "ok": True, **payload}))

    preflight(nodes[1], 1, role="node", master="10.0.0.1:29500")  # a node's: no matrix
    preflight(nodes[0], 1, role="master", links=report(["gpu-a", "gpu-b"]))
    drain(ingest)

    job.refresh_from_db()
    assert job.links["chosen"] == "10.9.0.0/24" and job.links["attempt"] == 0 and job.links["measured_at"] == T0
    shown = api.get(f"/api/jobs/{job.pk}").json()["links"]
    assert shown["pairs"][0] == {"network": "10.0.0.0/24", "a": 0, "b": 1, "mb_per_s": 6.1, "latency_ms": 0.3,
                                 "flagged": True}
    assert [n["chosen"] for n in shown["networks"]] == [False, True]
    assert Machine.objects.get(name="gpu-b").measured_links == {
        "eth0": {"mb_per_s": 6.1, "latency_ms": 0.3, "pairs": 1, "job": job.pk, "measured_at": T0},
        "ib0": {"mb_per_s": 900.0, "latency_ms": 0.05, "pairs": 1, "job": job.pk, "measured_at": T0}}
    listed = {m["name"]: m for m in api.get("/api/machines").json()}
    assert listed["gpu-a"]["measured_links"]["ib0"]["mb_per_s"] == 900.0


@pytest.mark.django_db(transaction=True)
def test_an_older_attempts_report_arriving_late_does_not_replace_the_current_one(owner):
    from torchyard_server.jobs.control.links import job_record_links

    for name in ("gpu-a", "gpu-b", "gpu-c"):
        bring_online(name)
    job = make_job(name="j", owner=owner, status=Job.Status.RUNNING, world_size=2, progress={})
    job_record_links(job_id=job.pk, attempt=2, ts=T0, report=report(["gpu-a", "gpu-c"]))
    job_record_links(job_id=job.pk, attempt=1, ts=T0 - 60, report=report(["gpu-a", "gpu-b"]))
    job.refresh_from_db()
    assert job.links["attempt"] == 2 and set(job.links["addresses"]) == {"gpu-a", "gpu-c"}


def plan(machines: list[str]) -> Plan:
    return Plan.from_json({"nnodes": len(machines), "master_addr": "10.0.0.1", "nodes": [
        {"node_rank": r, "machine_name": m, "host": f"10.0.0.{r + 1}"} for r, m in enumerate(machines)]})


@pytest.mark.django_db
def test_a_relaunch_on_measured_machines_reuses_the_choice_and_a_new_machine_is_measured_again(owner):
    job = make_job(name="j", owner=owner, links={**report(["gpu-a", "gpu-b"]), "attempt": 0})
    assert reused_links(job, plan(["gpu-a", "gpu-b"])) == {"network": "10.9.0.0/24", "master_address": "10.9.0.1"}
    # Shrunk to one of them, or the master elsewhere among them: still known.
    assert reused_links(job, plan(["gpu-b", "gpu-a"])) == {"network": "10.9.0.0/24", "master_address": "10.9.0.2"}
    assert reused_links(job, plan(["gpu-a", "spare"])) == {}  # a spare took a node's place: measure it
    assert reused_links(make_job(name="k", owner=owner), plan(["gpu-a", "gpu-b"])) == {}
    unpinned = make_job(name="l", owner=owner, links={**report(["gpu-a", "gpu-b"]), "chosen": "", "addresses": {}})
    assert reused_links(unpinned, plan(["gpu-a", "gpu-b"])) == {}

"""Placement: pure functions over machine snapshots (no cluster needed), and the one lock that
keeps two controller threads from giving the same GPU to two jobs."""

from __future__ import annotations

import threading

import pytest
from django.db import connection
from factories import bring_online
from torchyard_server.jobs.placement.candidates import Candidate, PlanError
from torchyard_server.jobs.placement.planner import plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec
from torchyard_server.jobs.spec.plan import Plan


def gpus(count: int, memory_mb: int = 24_000) -> list[dict]:
    return [{"index": i, "name": "GPU", "memory_mb": memory_mb} for i in range(count)]


def spec(**resources) -> dict:
    base = {"resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 0, "min_gpu_memory": 0},
            "placement": {"policy": "pack", "machines": [], "oversubscribe": False},
            "distributed": {"backend": "auto"}, "hyperparameters": {}, "scaling": {"mode": "none"}}
    if "workers" in resources:
        base["resources"] = {"min_gpu_memory": 0}
    base["resources"].update(resources)
    return base


def plan(s: dict, machines: list[Candidate]) -> Plan:
    return plan_job(JobSpec.from_json(s), machines, pick_port=lambda m: 29500)


def names(p: dict) -> list[str]:
    return [n.machine_name for n in p.nodes]


def test_pack_is_least_waste_the_machine_that_fits_most_tightly():
    machines = [Candidate(1, "big", "h1", "online", gpus=gpus(8)),
                Candidate(2, "small", "h2", "online", gpus=gpus(2)),
                Candidate(3, "three-free", "h3", "online", gpus=gpus(4), busy_gpus={0})]
    assert names(plan(spec(gpus_per_node=2, procs_per_node=2), machines)) == ["small"]
    assert names(plan(spec(nodes=2, gpus_per_node=2, procs_per_node=2), machines)) == ["small", "three-free"]
    # CPU jobs: by free cores left.
    cpus = [Candidate(1, "c16", "h1", "online", cpu_count=16), Candidate(2, "c4", "h2", "online", cpu_count=4)]
    assert names(plan(spec(procs_per_node=4), cpus)) == ["c4"]


def test_spread_takes_the_least_loaded_first():
    machines = [Candidate(1, "a", "h1", "online", cpu_count=8, live_nodes=2, busy_procs=2),
                Candidate(2, "b", "h2", "online", cpu_count=8)]
    s = spec()
    s["placement"]["policy"] = "spread"
    assert names(plan(s, machines)) == ["b"]


def test_min_gpu_memory_skips_small_gpus_and_refuses_when_none_fit():
    machines = [Candidate(1, "small", "h1", "online", gpus=gpus(4, 16_000)),
                Candidate(2, "large", "h2", "online", gpus=gpus(1, 80_000))]
    assert names(plan(spec(gpus_per_node=1, min_gpu_memory=40_000), machines)) == ["large"]
    with pytest.raises(PlanError) as refused:
        plan(spec(nodes=2, gpus_per_node=1, min_gpu_memory=40_000), machines)
    assert refused.value.kind == "capacity" and "GPUs of >= 40000 MB" in refused.value.reason


def test_manual_placement_keeps_the_users_order_and_names_unknown_machines():
    machines = [Candidate(1, "a", "h1", "online", cpu_count=4), Candidate(2, "b", "h2", "online", cpu_count=4)]
    s = spec(nodes=2)
    s["placement"]["machines"] = ["b", "a"]
    p = plan(s, machines)
    assert names(p) == ["b", "a"] and p.master_addr == "h2"
    s["placement"]["machines"] = ["b", "nope"]
    with pytest.raises(PlanError) as refused:
        plan(s, machines)
    assert refused.value.kind == "invalid" and "nope" in refused.value.reason


def test_distroml_workers_with_gpus_per_worker_get_that_many_gpus_each():
    # 4 workers x 1 GPU on two 2-GPU machines: 2 nodes x 2 processes with 2 GPUs each.
    machines = [Candidate(1, "a", "h1", "online", gpus=gpus(2)), Candidate(2, "b", "h2", "online", gpus=gpus(2))]
    p = plan(spec(workers=4, gpus_per_worker=1), machines)
    assert (p.nnodes, p.procs_per_node, p.backend) == (2, 2, "nccl")
    assert [n.gpus for n in p.nodes] == [[0, 1], [0, 1]]


def test_a_cpu_machine_takes_no_more_processes_than_cores_once_busy_unless_the_job_allows_it():
    busy = [Candidate(1, "two-cores", "h1", "online", cpu_count=2, live_nodes=1, busy_procs=4)]
    with pytest.raises(PlanError) as waiting:
        plan(spec(procs_per_node=4), busy)
    assert waiting.value.kind == "busy" and "room for 4 more processes" in waiting.value.reason
    allowed = spec(procs_per_node=4)
    allowed["placement"]["oversubscribe"] = True
    assert names(plan(allowed, busy)) == ["two-cores"]
    # An idle machine takes one node of any size (with a warning), as before.
    idle = [Candidate(1, "two-cores", "h1", "online", cpu_count=2)]
    assert plan(spec(procs_per_node=4), idle).warnings == ["two-cores has 2 CPUs for 4 processes"]


@pytest.mark.django_db(transaction=True)
@pytest.mark.skipif(connection.vendor != "postgresql", reason="needs concurrent writers (PostgreSQL)")
def test_two_jobs_scheduled_at_once_never_get_the_same_gpu(owner):
    from torchyard_server.jobs.control.queue_pass import job_schedule
    from torchyard_server.jobs.models import Job, JobNode

    bring_online("one-gpu", gpus=gpus(1))
    s = {"name": "g", "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, "min_gpu_memory": 0},
         "placement": {"policy": "pack", "machines": []}, "distributed": {"backend": "auto"},
         "hyperparameters": {}, "scaling": {"mode": "none"}, "fault_tolerance": {"heartbeat_timeout": 10},
         "entrypoint": "examples/mlp_ddp.py", "args": [], "env": {}}
    jobs = [Job.objects.create(name=f"g{i}", spec=s, owner=owner) for i in range(2)]
    barrier = threading.Barrier(2)

    def schedule(job_id: int) -> None:
        barrier.wait()
        try:
            job_schedule(job_id=job_id)
        finally:
            connection.close()

    threads = [threading.Thread(target=schedule, args=(job.pk,)) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    statuses = sorted(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("status", flat=True))
    assert statuses == ["dispatching", "queued"]
    assert JobNode.objects.filter(gpus=[0]).count() == 1
    assert "waiting for 1 machines with free GPUs" in Job.objects.get(status="queued").status_reason


def versioned(id_: int, name: str, torch: str, python: str = "3.11.7") -> Candidate:
    return Candidate(id_, name, f"h{id_}", "online", cpu_count=8, torch_version=torch, python_version=python)


def test_it_picks_machines_whose_torch_and_python_agree_and_shows_them():
    machines = [versioned(1, "old", "2.4.1"), versioned(2, "a", "2.13.0"), versioned(3, "b", "2.13.0", "3.11.2")]
    p = plan(spec(nodes=2), machines)
    assert sorted(names(p)) == ["a", "b"]
    assert p.preflight["versions"] == {"a": "torch 2.13.0 on Python 3.11.7", "b": "torch 2.13.0 on Python 3.11.2"}
    assert p.preflight["master"] == f"{p.master_addr}:29500"


def test_machines_that_do_not_say_their_versions_go_with_any():
    machines = [versioned(1, "quiet", ""), versioned(2, "a", "2.13.0")]
    machines[0].python_version = ""
    assert sorted(names(plan(spec(nodes=2), machines))) == ["a", "quiet"]


def test_machines_that_disagree_are_refused_naming_each_version():
    machines = [versioned(1, "a", "2.13.0"), versioned(2, "b", "2.13.0", "3.12.1")]
    with pytest.raises(PlanError) as auto:
        plan(spec(nodes=2), machines)
    assert auto.value.kind == "capacity"
    assert "a torch 2.13.0 on Python 3.11.7, b torch 2.13.0 on Python 3.12.1" in auto.value.reason
    manual = spec(nodes=2)
    manual["placement"]["machines"] = ["a", "b"]
    with pytest.raises(PlanError) as chosen:
        plan(manual, machines)
    assert chosen.value.kind == "invalid"

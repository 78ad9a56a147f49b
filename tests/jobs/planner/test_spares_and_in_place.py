"""Hot spares (resources.spares) and recovery in place: the planner holds spares beside the nodes,
other jobs are not planned onto them, and a recovery keeps every node where it was or moves only the
lost one onto a spare (planner.plan_in_place)."""

from __future__ import annotations

import pytest
from torchyard_server.jobs.placement.candidates import Candidate, PlanError
from torchyard_server.jobs.placement.planner import plan_in_place, plan_job
from torchyard_server.jobs.spec.jobspec import JobSpec

from jobs.planner.test_planner import gpus, names, plan, spec


def machines(count: int, **extra) -> list[Candidate]:
    return [Candidate(i + 1, f"m{i + 1}", f"10.0.0.{i + 1}", "online", gpus=gpus(2), **extra) for i in range(count)]


def test_spares_are_held_beside_the_nodes_and_the_job_waits_without_them():
    s = spec(nodes=2, gpus_per_node=2, procs_per_node=2, spares=1)
    placed = plan(s, machines(3))
    assert names(placed) == ["m1", "m2"]
    assert [(x.machine_name, x.gpus) for x in placed.spares] == [("m3", [0, 1])]
    assert next(x for x in placed.skipped if x["machine_name"] == "m3")["reason"] == "held as a hot spare of the job"
    # Two machines could hold the nodes but not the spare: refused as capacity (submission says so).
    with pytest.raises(PlanError) as refused:
        plan(s, machines(2))
    assert refused.value.kind == "capacity" and "needs 1 hot spare beside its 2 nodes" in refused.value.reason
    # A third machine that is busy: the job waits for it.
    busy = machines(3)
    busy[2].busy_gpus = {0}
    with pytest.raises(PlanError) as waiting:
        plan(s, busy)
    assert waiting.value.kind == "busy"
    # A quarantined machine is never a spare.
    quarantined = machines(4)
    quarantined[2].status, quarantined[2].quarantine_reason = "quarantined", "rank 0 held job 7"
    assert [x.machine_name for x in plan(s, quarantined).spares] == ["m4"]


def test_a_recovery_stays_in_place_or_moves_only_the_lost_node_onto_a_spare():
    s = spec(nodes=2, gpus_per_node=2, procs_per_node=2, spares=1)
    first = plan(s, machines(3))

    def again(cluster: list[Candidate]):
        return plan_in_place(JobSpec.from_json(s), first, cluster, pick_port=lambda m: 29600)

    same, how = again(machines(3))
    assert how == "in place on the same machines"
    assert [(n.machine_name, n.rank_start) for n in same.nodes] == [("m1", 0), ("m2", 2)]
    assert same.master_port == 29600 and [x.machine_name for x in same.spares] == ["m3"]

    lost = machines(3)
    lost[1].status, lost[1].suspect = "offline", True  # m2's node was lost there
    moved, how = again(lost)
    assert how == "hot spare m3 takes node 1's place (m2 lost)"
    assert [(n.node_rank, n.machine_name, n.host, n.rank_start) for n in moved.nodes] == [
        (0, "m1", "10.0.0.1", 0), (1, "m3", "10.0.0.3", 2)]
    assert moved.spares == [] and moved.world_size == first.world_size

    # Node 0's machine lost: the spare becomes the master.
    master_lost = machines(3)
    master_lost[0].status, master_lost[0].suspect = "offline", True
    moved, _ = again(master_lost)
    assert moved.master_addr == "10.0.0.3" and moved.preflight["master"] == "10.0.0.3:29600"

    # Two machines lost, one spare: no plan in place (the caller plans anew).
    two_lost = machines(3)
    for machine in two_lost[:2]:
        machine.status, machine.suspect = "offline", True
    assert again(two_lost) is None
    # Its GPUs taken by another job meanwhile: the spare takes its place.
    taken = machines(3)
    taken[0].busy_gpus = {1}
    assert again(taken)[1] == "hot spare m3 takes node 0's place (m1 taken by another job)"


def test_no_spares_means_a_lost_machine_is_planned_anew_and_elastic_jobs_never_in_place():
    s = spec(nodes=2, procs_per_node=1)
    cpu = [Candidate(i, f"c{i}", f"h{i}", "online", cpu_count=4) for i in (1, 2, 3)]
    first = plan_job(JobSpec.from_json(s), cpu, pick_port=lambda m: 1)
    assert first.spares == []
    cpu[1].status = "offline"
    assert plan_in_place(JobSpec.from_json(s), first, cpu, pick_port=lambda m: 2) is None
    elastic = JobSpec.from_json(spec(nodes=3, min_nodes=2, procs_per_node=1))
    assert plan_in_place(elastic, plan_job(elastic, cpu, pick_port=lambda m: 1), cpu, pick_port=lambda m: 2) is None


def job_body(name: str, **resources) -> dict:
    return {"name": name, "entrypoint": "examples/mlp_ddp.py",
            "resources": {"nodes": 1, "procs_per_node": 1, "gpus_per_node": 1, **resources}}


@pytest.mark.django_db
def test_a_live_jobs_spares_are_held_from_other_jobs_and_the_spec_says_what_spares_need(api):
    from factories import bring_online
    from torchyard_server.jobs.control.queue_pass import job_schedule
    from torchyard_server.jobs.models import Job

    for name in ("s1", "s2", "s3"):
        bring_online(name, gpus=gpus(1))
    refused = api.post("/api/jobs", job_body("elastic", nodes="1:2", spares=1), format="json")
    assert refused.status_code == 400 and "spares are for a fixed count" in str(refused.json()["resources"]["spares"])
    assert api.post("/api/jobs", job_body("many", spares=9), format="json").status_code == 400

    held = api.post("/api/jobs", job_body("held", nodes=2, spares=1), format="json")
    assert held.status_code == 201, held.json()
    job_schedule(job_id=held.json()["id"])
    job = Job.objects.get(pk=held.json()["id"])
    assert job.status == "dispatching" and len(job.plan["spares"]) == 1
    spare = job.plan["spares"][0]["machine_name"]
    assert spare not in {n.machine_name for n in job.nodes.all()}
    # The third machine is the spare: a one-GPU job waits for it.
    other = api.post("/api/jobs", job_body("other"), format="json").json()
    job_schedule(job_id=other["id"])
    waiting = Job.objects.get(pk=other["id"])
    assert waiting.status == "queued" and "waiting for 1 machines with free GPUs" in waiting.status_reason
    assert f"{spare}: held as a hot spare" not in waiting.status_reason  # busy, as if a node ran there
